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


class ProgressTimedSocket:
    """The client socket as a response is written to it: sendall is send()
    after send(), each waiting at most the socket's timeout for room, so the
    timer restarts whenever the client took some bytes, as nginx's
    send_timeout runs between two writes (gevent's own sendall bounds the
    whole call: a client reading a 255 KiB piece at 16 KiB/s was cut by an
    8 s timeout)."""

    __slots__ = ("_sock",)

    def __init__(self, sock):
        self._sock = sock

    def sendall(self, data, flags=0) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[self._sock.send(view, flags):]

    def __getattr__(self, name):
        return getattr(self._sock, name)


class SendTimeoutWorker(GeventWorker):
    def handle_request(self, listener_name, req, sock, addr):
        # The timeout bounds each wait for room to write; between requests
        # the socket is blocking again, and keepalive's timer applies.
        sock.settimeout(SEND_TIMEOUT)
        try:
            return super().handle_request(listener_name, req, ProgressTimedSocket(sock), addr)
        except TimeoutError:
            # One line, not the traceback gunicorn logs for a socket error;
            # StopIteration is how gunicorn's handler closes a connection.
            self.log.warning("client %s took nothing for SEND_TIMEOUT_MS (%g s): closed",
                             addr[0] if isinstance(addr, tuple) else addr, SEND_TIMEOUT)
            raise StopIteration() from None
        finally:
            sock.settimeout(None)
