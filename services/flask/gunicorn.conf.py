"""gunicorn settings for the Flask serving path."""
import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8080')}"
worker_class = "gevent"
# Explicit: gunicorn's examples use cpu_count(), which counts the host's
# cores, not the container's cpuset.
workers = int(os.environ.get("GUNICORN_WORKERS", "1"))
# Concurrent requests per gevent worker; above the loadgen's connection counts.
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "2000"))
keepalive = 75  # seconds; benchmark clients keep connections open
timeout = 30
accesslog = None  # per-request logging would be measured as well
errorlog = "-"
loglevel = "warning"
