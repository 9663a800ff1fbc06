"""Admission at the door (lab_http/app.py's at_the_door, issue 39): under
overload the Python paths refuse most requests, and Flask's request,
context and response cost a refusal more of the core than the rest of it.
The door decides admission before Flask: a refusal gets Flask's own 503
byte for byte without entering Flask; any request Flask would answer
otherwise (a bad version, host or name, another route or method, a body to
read first) goes through Flask whole; a request admitted at the door is
served with its one admission, and its place comes back whatever happens
in Flask. The real Flask app with an in-memory store whose lookup of one
name waits: a request for it holds the path's only place."""
import contextlib
from urllib.parse import urlsplit

import gevent
import pytest
from flask import request, request_started
from gevent.event import Event
from gunicorn.util import unquote_to_wsgi_str
from werkzeug.test import EnvironBuilder

from lab_http import StoredFile, create_app

BODY = b"hello\n"
HELD = "held.bin"  # its lookup waits until the test ends


class WaitingStore:
    kind = "memory"

    def __init__(self):
        self.release = Event()

    def within(self, deadline: float):
        return contextlib.nullcontext()

    def find(self, name: str) -> StoredFile:
        if name == HELD:
            self.release.wait()
        return StoredFile(len(BODY), 0, '"b0d1"', "text/plain", None)

    def read(self, stored: StoredFile, start: int, end: int):
        yield BODY[start:end]


def gunicorn_environ(method: str, target: str, headers: dict | None = None, body: bytes = b"",
                     protocol: str = "HTTP/1.1") -> dict:
    """The environ gunicorn makes of the request: RAW_URI as sent, PATH_INFO
    its path percent-decoded (gunicorn's own function), Host as sent (None:
    none), a chunked body's length not known."""
    headers = dict(headers or {})
    host = headers.pop("Host", "lab")
    environ = EnvironBuilder(method=method, path="/", headers=headers, data=body or None).get_environ()
    environ.update(RAW_URI=target, PATH_INFO=unquote_to_wsgi_str(urlsplit(target).path), SERVER_PROTOCOL=protocol)
    environ.pop("HTTP_HOST", None)
    if host is not None:
        environ["HTTP_HOST"] = host
    if "Transfer-Encoding" in headers:
        environ.pop("CONTENT_LENGTH", None)
    return environ


def answer(app, environ: dict) -> tuple[str, list, bytes]:
    started = []
    iterable = app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    try:
        body = b"".join(iterable)
    finally:
        if hasattr(iterable, "close"):
            iterable.close()
    status, headers = started[0]
    return status, list(headers), body


@pytest.fixture
def path(monkeypatch):
    """The app with one place (FLASK_MAX_OPEN_STREAMS=1: the limit's
    floor) and a 200 ms deadline (a waiter's wait: 50 ms), and the paths
    of the requests that entered Flask (its request_started)."""
    monkeypatch.setenv("FLASK_MAX_OPEN_STREAMS", "1")
    monkeypatch.setenv("REQUEST_DEADLINE_MS", "200")
    monkeypatch.delenv("LAB_TEST_EXTRA_WORK", raising=False)
    store = WaitingStore()
    app = create_app(store, "gridfs-lab-test")
    entered = []

    def started(sender, **extra):
        entered.append(request.path)
    request_started.connect(started, app)
    yield app, store, entered
    request_started.disconnect(started, app)
    store.release.set()


@pytest.fixture
def full(path):
    """The path with its one place held by a lookup that waits."""
    app, store, entered = path
    holder = gevent.spawn(answer, app, gunicorn_environ("GET", f"/files/{HELD}"))
    gevent.sleep(0)  # it runs until its lookup waits
    assert entered == [f"/files/{HELD}"] and not holder.dead
    yield app, entered
    store.release.set()
    assert holder.get(timeout=5)[0].startswith("200 ")


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_refusal_at_the_door_is_flasks_own_503_without_entering_flask(full, method):
    app, entered = full
    at_the_door = answer(app, gunicorn_environ(method, "/files/a.bin"))
    assert len(entered) == 1  # the holder's only
    # A body is read inside Flask first (framing_refusal): its refusal is Flask's.
    through_flask = answer(app, gunicorn_environ(method, "/files/a.bin", {"Content-Length": "1"}, b"x"))
    assert len(entered) == 2
    assert at_the_door == through_flask
    status, headers, body = at_the_door
    assert status.startswith("503 ") and ("Retry-After", "1") in headers and ("Content-Length", "12") in headers
    assert body == (b"server busy\n" if method == "GET" else b"")


# (method, target, headers, body, protocol, the status Flask answers with its place held, decided at the door)
CASES = [
    ("GET", "/files/a.bin", None, b"", "HTTP/1.1", 503, True),
    ("HEAD", "/files/a.bin", None, b"", "HTTP/1.1", 503, True),
    ("GET", "/files/a.bin?x=1", None, b"", "HTTP/1.1", 503, True),
    ("GET", "/files/dir/a%20b.bin", None, b"", "HTTP/1.1", 503, True),
    ("GET", "http://lab/files/a.bin", None, b"", "HTTP/1.1", 503, True),
    ("GET", "/files/a.bin", {"Content-Length": "0"}, b"", "HTTP/1.1", 503, True),
    ("GET", "/files/a.bin", {"Host": None}, b"", "HTTP/1.0", 503, True),
    ("GET", "/files/a.bin", {"Content-Length": "1"}, b"x", "HTTP/1.1", 503, False),
    ("GET", "/files/a.bin", {"Transfer-Encoding": "chunked"}, b"1\r\nx\r\n0\r\n\r\n", "HTTP/1.1", 503, False),
    ("GET", "/files/a.bin", {"Transfer-Encoding": "gzip"}, b"", "HTTP/1.1", 501, False),
    ("POST", "/files/a.bin", None, b"", "HTTP/1.1", 405, False),
    ("OPTIONS", "/files/a.bin", None, b"", "HTTP/1.1", 405, False),
    ("GET", "/files/", None, b"", "HTTP/1.1", 404, False),
    ("GET", "/files//a.bin", None, b"", "HTTP/1.1", 404, False),
    ("GET", "/filesx/a.bin", None, b"", "HTTP/1.1", 404, False),
    ("GET", "/health", None, b"", "HTTP/1.1", 200, False),
    ("GET", "/files/a%ZZ", None, b"", "HTTP/1.1", 400, False),
    ("GET", "/files/a/../b", None, b"", "HTTP/1.1", 400, False),
    ("GET", "/files/a%0Ab", None, b"", "HTTP/1.1", 404, False),  # werkzeug's "." takes no newline: no route
    ("GET", "/files/a.bin", {"Host": "a..b"}, b"", "HTTP/1.1", 400, False),
    ("GET", "http://a..b/files/a.bin", None, b"", "HTTP/1.1", 400, False),
    ("GET", "/files/a.bin", {"Host": None}, b"", "HTTP/1.1", 400, False),
    ("GET", "/files/a.bin", None, b"", "HTTP/2.0", 505, False),
    ("GET", "/files/a.bin", None, b"", "HTTP/0.9", 400, False),
]


@pytest.mark.parametrize("method, target, headers, body, protocol, status, at_the_door", CASES,
                         ids=[f"{c[0]} {c[1]} {c[2] or ''} {c[4]}" for c in CASES])
def test_the_door_decides_exactly_the_requests_flask_would_answer_with_admission(
        full, method, target, headers, body, protocol, status, at_the_door):
    app, entered = full
    got = answer(app, gunicorn_environ(method, target, headers, body, protocol))
    assert int(got[0].split()[0]) == status, got
    assert (got[2] == b"server busy\n") == (status == 503 and method == "GET"), got
    assert len(entered) == (1 if at_the_door else 2), entered


def test_a_request_admitted_at_the_door_is_served_with_that_one_admission(path):
    """With one place, a request admitted twice (at the door and again in
    serve_file) would wait for itself and be refused."""
    app, _, entered = path
    for method in ("GET", "HEAD", "GET"):
        status, headers, body = answer(app, gunicorn_environ(method, "/files/a.bin"))
        assert status.startswith("200 ") and ("Content-Length", str(len(BODY))) in headers
        assert body == (BODY if method == "GET" else b"")
    assert entered == ["/files/a.bin"] * 3


def test_a_place_taken_at_the_door_comes_back_when_flask_fails_before_serving(path):
    app, _, _ = path

    @app.before_request
    def failing():
        if request.path == "/files/boom.bin":
            raise RuntimeError("a failure between the door and serve_file")

    assert answer(app, gunicorn_environ("GET", "/files/boom.bin"))[0].startswith("500 ")
    status, _, body = answer(app, gunicorn_environ("GET", "/files/a.bin"))
    assert status.startswith("200 ") and body == BODY
