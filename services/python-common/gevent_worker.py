"""gunicorn's gevent worker with two of nginx's connection rules, for the
Python serving paths (gunicorn.conf.py names it):
- send_timeout: a response whose client takes nothing for SEND_TIMEOUT_MS
  (default 60000, nginx's 60 s) is closed, so that a stalled reader does
  not pin its response's memory for ever;
- at the connection cap (worker_connections), connections are not kept
  alive: a response then says "Connection: close", and a kept-alive
  connection idle for IDLE_AT_CAP_S is closed, as nginx drains its reusable
  ones when it runs out. gunicorn stops accepting at the cap, so a client's
  idle connections held every place and a new connection waited in the
  backlog for the keep-alive timeout (75 s; answers held 30 s while the
  database was frozen). Closing an idle connection at once instead raced
  clients that send the next request as the last answer ends (wrk: 516 and
  2333 read errors at 1000 clients);
- a response's head goes out with the first piece of its body, in one
  send (gunicorn sends them one after the other): one segment where there
  were two, for every answer and every refusal (issue 39: at ten times
  flask-postgres's capacity, the refusals took half of its core).

Outside lab_http: gunicorn's master imports the worker class before any
worker has monkey-patched the standard library, and lab_http imports Flask.
"""
import os
import sys
import time

import gevent
from gunicorn.http.errors import NoMoreData
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

# A response's first write is held for its next (ProgressTimedSocket) when
# no larger: gunicorn's head, some 200 bytes with the lab's headers.
HELD_HEAD_BYTES = 16384

# At the cap, how long a kept-alive connection may wait for its next request
# (gunicorn's keepalive, 75 s, otherwise): long enough that a client sending
# at once is never cut, short enough that waiting clients get in.
IDLE_AT_CAP_S = 1.0


class ProgressTimedSocket:
    """The client socket as a response is written to it:
    - sendall is send() after send(), each waiting at most the socket's
      timeout for room, so the timer restarts whenever the client took some
      bytes, as nginx's send_timeout runs between two writes (gevent's own
      sendall bounds the whole call: a client reading a 255 KiB piece at
      16 KiB/s was cut by an 8 s timeout);
    - the first sendall, gunicorn's head, is held (when small) and goes out
      with the next one, the body's first piece, in one sendmsg: gunicorn
      writes the head just before that piece (Response.write), so it waits
      for nothing. Anything else done with the socket (a sendfile, a
      shutdown) and the request's end (flush) send it first."""

    __slots__ = ("_sock", "_held", "_writes")

    def __init__(self, sock):
        self._sock = sock
        self._held = b""
        self._writes = 0

    def sendall(self, data, flags=0) -> None:
        view = memoryview(data).cast("B")
        self._writes += 1
        if self._writes == 1 and len(view) <= HELD_HEAD_BYTES:
            self._held = bytes(view)
            return
        held, self._held = self._held, b""
        while held:  # the head and the piece side by side, neither copied
            sent = self._sock.sendmsg([held, view], (), flags)
            held, view = held[sent:], view[max(0, sent - len(held)):]
        while view:
            view = view[self._sock.send(view, flags):]

    def flush(self) -> None:
        """Sends the held head, if any (a response without a body)."""
        held, self._held = self._held, b""
        view = memoryview(held)
        while view:
            view = view[self._sock.send(view):]

    def __getattr__(self, name):
        self.flush()
        return getattr(self._sock, name)


class IdleAtTheCap(NoMoreData):
    """Ends a kept-alive connection's wait for its next request (gunicorn
    closes the connection quietly on NoMoreData)."""

    def __init__(self):
        super().__init__(b"")


class SendTimeoutWorker(GeventWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.open_connections = 0
        self.kept_alive = set()  # greenlets whose connection served a request
        self.idle = {}           # those of them waiting for the next one: since when
        self.draining = set()    # idle ones whose close is scheduled

    def at_cap(self) -> bool:
        return self.open_connections >= self.worker_connections

    def load_wsgi(self):
        super().load_wsgi()
        app = self.wsgi

        def closing_at_cap(environ, start_response):
            if self.at_cap():
                # gunicorn's response object owns start_response: its
                # force_close sends "Connection: close".
                force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(force_close):
                    force_close()
            return app(environ, start_response)
        self.wsgi = closing_at_cap

    def handle(self, listener, client, addr):
        self.open_connections += 1
        if self.at_cap():  # the server accepts no more: free idle places
            now = time.monotonic()
            for greenlet, since in list(self.idle.items()):
                if greenlet not in self.draining:  # once per idle spell, however many arrive
                    self.draining.add(greenlet)
                    gevent.spawn_later(max(0.0, since + IDLE_AT_CAP_S - now), self.drain, greenlet, since)
        try:
            return super().handle(listener, client, addr)
        finally:
            self.open_connections -= 1
            self.kept_alive.discard(gevent.getcurrent())

    def drain(self, greenlet, since: float) -> None:
        # As gevent's kill: thrown from the hub, and only if it still waits
        # in the same idle spell when the hub gets there.
        gevent.get_hub().loop.run_callback(self.close_if_idle, greenlet, since)

    def close_if_idle(self, greenlet, since: float) -> None:
        self.draining.discard(greenlet)
        if self.idle.get(greenlet) == since and self.at_cap():
            del self.idle[greenlet]
            greenlet.throw(IdleAtTheCap())

    def timeout_ctx(self):
        """The wait for a connection's next request (gunicorn's keepalive
        timer, IDLE_AT_CAP_S at the cap)."""
        current = gevent.getcurrent()
        if current not in self.kept_alive:
            return super().timeout_ctx()
        timer = gevent.Timeout(IDLE_AT_CAP_S, False) if self.at_cap() else super().timeout_ctx()
        return IdleWait(self, current, timer)

    def handle_request(self, listener_name, req, sock, addr):
        self.kept_alive.add(gevent.getcurrent())
        # The timeout bounds each wait for room to write; between requests
        # the socket is blocking again, and keepalive's timer applies.
        sock.settimeout(SEND_TIMEOUT)
        timed = ProgressTimedSocket(sock)
        try:
            try:
                handled = super().handle_request(listener_name, req, timed, addr)
            except StopIteration:  # the answer is over and the connection closes after it
                timed.flush()
                raise
            timed.flush()
            return handled
        except TimeoutError:
            # One line, not the traceback gunicorn logs for a socket error;
            # StopIteration is how gunicorn's handler closes a connection.
            self.log.warning("client %s took nothing for SEND_TIMEOUT_MS (%g s): closed",
                             addr[0] if isinstance(addr, tuple) else addr, SEND_TIMEOUT)
            raise StopIteration() from None
        finally:
            sock.settimeout(None)


class IdleWait:
    """The keepalive timer, with the greenlet marked idle while it waits."""

    __slots__ = ("worker", "greenlet", "timer")

    def __init__(self, worker: SendTimeoutWorker, greenlet, timer):
        self.worker, self.greenlet, self.timer = worker, greenlet, timer

    def __enter__(self):
        self.worker.idle[self.greenlet] = time.monotonic()
        return self.timer.__enter__()

    def __exit__(self, *exc_info):
        self.worker.idle.pop(self.greenlet, None)
        return self.timer.__exit__(*exc_info)
