"""gunicorn settings shared by the Python serving paths (flask,
flask-postgres): run from the path's folder, e.g.
    gunicorn -c ../python-common/gunicorn.conf.py app:app"""
import os

# The shared package (lab_http) sits beside this file, in the repository and
# in the images alike (/srv/python-common next to /srv/<path>).
pythonpath = os.path.dirname(os.path.abspath(__file__))
bind = f"0.0.0.0:{os.environ.get('PORT', '8080')}"
# gevent: each worker serves many connections; the database drivers
# (pymongo, psycopg >= 3.1.14) cooperate once the worker has monkey-patched
# the standard library, which it does before importing the app.
# gevent_worker.py adds nginx's send_timeout to gunicorn's gevent worker: a
# client that takes nothing of a response for SEND_TIMEOUT_MS (60 s) is closed.
worker_class = "gevent_worker.SendTimeoutWorker"
# Explicit: gunicorn's examples use cpu_count(), which counts the host's
# cores, not the container's cpuset.
workers = int(os.environ.get("GUNICORN_WORKERS", "1"))
# Connections the container serves at once, shared by its workers: 256, what
# every path is sized for (bench's vegeta workers, HTTPD_THREADS); more
# wait in the listen backlog until one closes. This bounds what stalled
# readers can pin: a response holds at most one read of its store
# (READ_BUFFER_BYTES, 1.25 MiB of chunks) plus the piece being sent and its
# objects: 1.4 to 1.6 MiB of resident memory measured per stalled response
# (tests/test_slow_readers.py, which checks this sum), so 256 x 1.6 MiB =
# 410 MiB plus gunicorn's own ~80 MiB (one worker, .env's for one core)
# stays inside the 512 MiB TARGET_MEM; the send timeout frees them within
# 60 s. (It was 2000: about 3 GiB.)
CONNECTIONS = 256
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS") or max(1, CONNECTIONS // workers))
keepalive = 75  # seconds; benchmark clients keep connections open
timeout = 30
# Any HTTP/<digit>.<digit> reaches the app, which answers a major version
# above 1 with 505 as nginx does (gunicorn itself would answer 400).
permit_unconventional_http_version = True
# No runtime control socket (gunicorn 25.1+): the lab sets everything by
# environment, a socket would be one more way in, and gunicorn makes it in
# $HOME/.gunicorn, on the images' read-only root an ERROR line at each start.
control_socket_disable = True
accesslog = None  # per-request logging would be measured as well
errorlog = "-"
loglevel = "warning"
