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
worker_class = "gevent"
# Explicit: gunicorn's examples use cpu_count(), which counts the host's
# cores, not the container's cpuset.
workers = int(os.environ.get("GUNICORN_WORKERS", "1"))
# Concurrent requests per gevent worker; above the loadgen's connection counts.
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "2000"))
keepalive = 75  # seconds; benchmark clients keep connections open
timeout = 30
# Any HTTP/<digit>.<digit> reaches the app, which answers a major version
# above 1 with 505 as nginx does (gunicorn itself would answer 400).
permit_unconventional_http_version = True
accesslog = None  # per-request logging would be measured as well
errorlog = "-"
loglevel = "warning"
