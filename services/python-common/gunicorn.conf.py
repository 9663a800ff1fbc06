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
# What the container holds at once, shared by its workers:
# - bodies under way (OPEN_STREAMS, lab_http's cap; the 201st waits for a
#   place within its deadline, then 503). A stalled one holds at most one
#   read of its store (READ_BUFFER_BYTES, 1.25 MiB of chunks) plus the piece
#   being sent: 1.4 to 1.6 MiB resident measured (tests/test_slow_readers.py
#   checks this sum), so 200 x 1.6 MiB = 320 MiB;
# - connections (CONNECTIONS), most of them waiting for the database or for
#   their next request, each a greenlet, its socket and its request (tens of
#   KiB: tests/test_deadlines.py measures them waiting), so 1024 of them fit
#   CONNECTIONS_BUDGET_MIB; with gunicorn's own ~80 MiB (one worker, .env's
#   for one core) all stays inside the 512 MiB TARGET_MEM.
# Connections past the cap wait in the listen backlog, where no deadline
# runs: at 256 (the cap before), a paused database at 100 requests/s x 3 s
# deadline had 300 under way and answers took 6-7 s. The send timeout frees
# stalled bodies within 60 s.
OPEN_STREAMS = 200
CONNECTIONS = 1024
CONNECTIONS_BUDGET_MIB = 100
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS") or max(1, CONNECTIONS // workers))
# Per worker, checked where it is read (lab_http, in each worker).
open_streams = os.environ.get("FLASK_MAX_OPEN_STREAMS") or str(max(1, OPEN_STREAMS // workers))
raw_env = [f"FLASK_MAX_OPEN_STREAMS={open_streams}"]
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
