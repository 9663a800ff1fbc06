"""gunicorn's gevent worker with nginx's send_timeout, for the Python serving
paths (gunicorn.conf.py names it): a response whose client takes nothing
for SEND_TIMEOUT_MS (default 60000, nginx's 60 s) is closed, so that a
stalled reader does not pin its response's memory for ever.

Outside lab_http: gunicorn's master imports the worker class before any
worker has monkey-patched the standard library, and lab_http imports Flask.
"""
import os
import sys

from gunicorn.workers.ggevent import GeventWorker


def send_timeout_seconds() -> float:
    """SEND_TIMEOUT_MS, the Node path's setting too (shorter only for tests)."""
    text = os.environ.get("SEND_TIMEOUT_MS") or "60000"
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ValueError(f"SEND_TIMEOUT_MS must be a positive whole number of milliseconds, got {text!r}")
    return int(text) / 1000


try:
    SEND_TIMEOUT = send_timeout_seconds()  # read in the master, as it loads this class
except ValueError as error:
    sys.exit(str(error))  # one line, and gunicorn stops before it serves


class SendTimeoutWorker(GeventWorker):
    def handle_request(self, listener_name, req, sock, addr):
        # The socket's timeout bounds each write of the response: gevent's
        # sendall of one piece (at most a chunk, 255 KiB) must end within it,
        # so the timer restarts with every piece, not over the whole body as
        # nginx's runs between two writes. Between requests the socket is
        # blocking again, and keepalive's timer applies.
        sock.settimeout(SEND_TIMEOUT)
        try:
            return super().handle_request(listener_name, req, sock, addr)
        except TimeoutError:
            # One line, not the traceback gunicorn logs for a socket error;
            # StopIteration is how gunicorn's handler closes a connection.
            self.log.warning("client %s took nothing for SEND_TIMEOUT_MS (%g s): closed",
                             addr[0] if isinstance(addr, tuple) else addr, SEND_TIMEOUT)
            raise StopIteration() from None
        finally:
            sock.settimeout(None)
