"""The Flask app every Python serving path runs: GET|HEAD /files/<name>
streams the newest revision of <name> out of a FileStore chunk by chunk,
with the HTTP semantics of nginx's static module (validators, Range,
304/412/416), so that the paths and nginx compare like for like; GET
/health answers without touching the store; a store that cannot answer is a
503 with Retry-After, a stored file that breaks GridFS's rules a 500.
Admission (admission.py) is decided at the door (at_the_door), before Flask
builds anything for the request: under overload most requests are refused,
and a refusal must cost the core little (issue 39)."""
import os
import sys
import time
from itertools import chain
from urllib.parse import quote

import gevent
from gevent.lock import BoundedSemaphore
from flask import Flask, Response, g, request
from werkzeug.http import http_date
from werkzeug.wsgi import ClosingIterator

from .admission import Admission
from .hosts import split_absolute_form, valid_host
from .names import content_type_for, name_from_target
from .preconditions import if_range_allows, precondition_status
from .ranges import NOT_SATISFIABLE, is_byte_range, parse_range
from .extra_work import extra_work, extra_work_units
from .store import CorruptFile, FileStore, StoreError, StoreUnavailable


class DeadlinePassed(StoreUnavailable):
    """The request's deadline passed before its head could go out."""


def request_deadline_seconds() -> float:
    """REQUEST_DEADLINE_MS (default 3000), the Node path's setting too: one
    deadline per request for its lookup and first chunk read, whatever the
    store's own waits (a pool slot, a statement timeout) would allow."""
    text = os.environ.get("REQUEST_DEADLINE_MS") or "3000"
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ValueError(f"REQUEST_DEADLINE_MS must be a positive whole number of milliseconds, got {text!r}")
    return int(text) / 1000


def open_streams_limit() -> int:
    """FLASK_MAX_OPEN_STREAMS: the responses with a body under way at once in this
    worker (gunicorn.conf.py sets it from the container's share, as it sets
    worker_connections); more wait for a place within their deadline."""
    text = os.environ.get("FLASK_MAX_OPEN_STREAMS") or "200"
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ValueError(f"FLASK_MAX_OPEN_STREAMS must be a positive whole number, got {text!r}")
    return int(text)


def before_deadline(deadline: float) -> gevent.Timeout:
    """A block that must end by `deadline` (time.monotonic()'s scale), or
    DeadlinePassed is raised where it waits: the paths run in gevent
    workers, so a wait on a socket or a pool is where the timeout lands.
    Only around code that can be interrupted anywhere (reading a request's
    body, flask-postgres's pool): a driver with its own deadline gets that
    instead (FileStore.within)."""
    return gevent.Timeout(max(deadline - time.monotonic(), 0.001),
                          DeadlinePassed("REQUEST_DEADLINE_MS passed before the head"))


def text_response(status: int, text: str, headers: dict | None = None) -> Response:
    return Response(text + "\n", status, headers, content_type="text/plain")


def unavailable() -> Response:
    return text_response(503, "storage unavailable", {"Retry-After": "1"})


def server_busy() -> Response:
    """admission's refusal (tests/test_admission.py and make overload know it by its body)."""
    return text_response(503, "server busy", {"Retry-After": "1"})


# The statuses after which nginx closes the connection (its special
# response handler turns keep-alive off for them): a client that sent a
# malformed request is not read further.
CLOSING_STATUSES = ("400 ", "413 ", "414 ", "500 ", "501 ", "505 ")


def closing_as_nginx(wsgi_app):
    """WSGI middleware: the connection closes after the statuses nginx
    closes it after. gunicorn drops an app's Connection header, so its
    response object (the bound owner of start_response) is asked to close;
    another server is left to its own keep-alive."""
    def app(environ, start_response):
        def start(status: str, headers, exc_info=None):
            if status.startswith(CLOSING_STATUSES):
                force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(force_close):
                    force_close()
            return start_response(status, headers, exc_info)
        return wsgi_app(environ, start)
    return app


def framing_refusal(environ: dict, deadline: float) -> Response | None:
    """What nginx answers a request's body framing with, before the app
    answers the request: 501 for a transfer coding other than chunked alone
    (gunicorn reads "gzip, chunked" as chunked), and the body read and
    passed over first, so that a broken one (a bad chunk size) is a 400 on
    its own, never a 400 after the file's answer."""
    coding = environ.get("HTTP_TRANSFER_ENCODING")
    if coding is not None and coding.strip().lower() != "chunked":
        return text_response(501, "transfer coding not implemented")
    if coding is None and environ.get("CONTENT_LENGTH") in (None, "", "0"):
        return None
    body = environ["wsgi.input"]
    try:
        with before_deadline(deadline):
            while body.read(65536):
                pass
    except Exception:  # the server's parse error, a dropped client or the deadline
        return text_response(400, "bad request body")
    return None


def head_refusal(environ: dict) -> Response | None:
    """What nginx answers a request's HTTP version and host with before the
    app answers the request, or None."""
    protocol = environ.get("SERVER_PROTOCOL", "HTTP/1.0")
    # gunicorn hands on every HTTP/<digit>.<digit> (gunicorn.conf.py), so
    # that the answer is nginx's: 505 for a major version above 1 (gunicorn
    # would say 400), 400 for "HTTP/0.x".
    major = protocol.removeprefix("HTTP/").split(".", 1)[0]
    if major > "1":
        return text_response(505, "HTTP version not supported")
    if major != "1":
        return text_response(400, "bad HTTP version")
    # HTTP/1.1 requires one valid Host (RFC 9112 3.2), and the authority
    # of an absolute-form target is a host too: refuse as nginx does,
    # since gunicorn lets a missing or malformed one through (it refuses
    # a second Host itself).
    host = environ.get("HTTP_HOST")
    if host is None and protocol != "HTTP/1.0":
        return text_response(400, "missing Host header")
    authority = split_absolute_form(environ.get("RAW_URI", ""))[0]
    if not all(valid_host(value) for value in (host, authority) if value is not None):
        return text_response(400, "bad host")
    return None


def request_target(environ: dict) -> str:
    """The raw target, so that decoding is ours (strict, once) and not the
    server's; the fallback re-encodes what another WSGI server decoded."""
    return environ.get("RAW_URI") or quote(environ.get("PATH_INFO", "").encode("latin-1"))


def waits_only_for_admission(environ: dict) -> bool:
    """A request Flask would answer with admission's decision first: a GET
    or HEAD routed to serve_file, with a well-formed name, no body and
    nothing nginx refuses first (head_refusal). Any other goes through
    Flask whole, which answers it as before."""
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return False
    path = environ.get("PATH_INFO", "")
    # serve_file's rule: werkzeug's path converter takes a first character other than "/"
    if not path.startswith("/files/") or path[7:8] in ("", "/"):
        return False
    if "HTTP_TRANSFER_ENCODING" in environ or environ.get("CONTENT_LENGTH") not in (None, "", "0"):
        return False  # a body: framing_refusal reads it first
    return head_refusal(environ) is None and name_from_target(request_target(environ))[0] is not None


# A request admitted at the door carries its admission and its deadline to serve_file in its environ.
ADMITTED_KEY = "lab_http.admitted"
DEADLINE_KEY = "lab_http.deadline"


def at_the_door(wsgi_app, admission: Admission, deadline_seconds: float, refused):
    """WSGI middleware: admission decided before Flask builds its request,
    its context and a response, which cost a refusal more of the core than
    the rest of it (at ten times flask-postgres's capacity the refusals
    took half of its core, issue 39). A refused request gets server_busy()'s
    answer, built once, byte for byte what Flask would send; an admitted one
    goes on to Flask with its admission and its deadline (DEADLINE_KEY,
    from its arrival: the wait for a place counts), and its place comes
    back here if Flask never reaches serve_file. refused(): called at each
    refusal."""
    busy = server_busy()
    status, headers, body = busy.status, busy.get_wsgi_headers({}).to_wsgi_list(), (busy.get_data(),)

    def app(environ, start_response):
        if not waits_only_for_admission(environ):
            return wsgi_app(environ, start_response)
        deadline = time.monotonic() + deadline_seconds
        admitted = admission.enter(deadline)
        if admitted is None:
            refused()
            start_response(status, headers)
            return () if environ["REQUEST_METHOD"] == "HEAD" else body  # werkzeug sends no body to a HEAD
        environ[ADMITTED_KEY], environ[DEADLINE_KEY] = admitted, deadline
        try:
            return wsgi_app(environ, start_response)
        finally:
            if environ.pop(ADMITTED_KEY, None) is not None:  # serve_file never took it: an error before
                admission.finished(admitted, failed=True)
    return app


class RefusalLog:
    """Refusals counted and logged at most once a second: one line per
    refusal would cost the path its refusals' speed."""

    def __init__(self, write, every: float = 1.0):
        self.write, self.every = write, every
        self.refused, self.since = 0, time.monotonic()

    def count(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self.since >= self.every:
            self.write(self.refused)
            self.refused, self.since = 0, now


def create_app(store: FileStore, service: str) -> Flask:
    """service names the path in log lines (e.g. "gridfs-lab-flask")."""
    app = Flask(service)
    deadline_seconds = request_deadline_seconds()
    # A body under way pins up to one read of the store (1.25 MiB) until its
    # client takes it; a request that waits for the database pins next to
    # nothing. So the bodies, not the connections, are what is capped: the
    # connections can then be many (gunicorn.conf.py), and no request waits
    # in the listen backlog, outside its deadline.
    streams_limit = open_streams_limit()
    open_streams = BoundedSemaphore(streams_limit)
    admission = Admission(streams_limit, deadline_seconds)
    work_units = extra_work_units()
    app.url_map.merge_slashes = False  # "/files//x" is a name to reject, not a redirect

    def log(message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {service}: {message}", file=sys.stderr, flush=True)

    if work_units:
        log(f"LAB_TEST_EXTRA_WORK={work_units}: every file request does {work_units} units of fixed work first "
            "(a test-only known change for make ab's B, never a real run's)")

    refusals = RefusalLog(lambda count: log(
        f"{count} requests refused in the last second or more: admission limit {admission.policy.limit:.1f}, "
        f"{admission.policy.in_flight} in flight, mean latency {admission.policy.mean_latency * 1000:.0f} ms"))
    app.wsgi_app = at_the_door(closing_as_nginx(app.wsgi_app), admission, deadline_seconds, refusals.count)

    @app.before_request
    def check_version_and_host():
        environ = request.environ
        # One deadline per request, from its arrival (at the door, for one
        # admitted there): reading a body it sent and the store's lookup and
        # first piece all fit in it.
        g.deadline = environ.get(DEADLINE_KEY) or time.monotonic() + deadline_seconds
        refusal = head_refusal(environ)
        if refusal is not None:
            return refusal
        return framing_refusal(environ, g.deadline)

    @app.get("/health")
    def health():
        return text_response(200, "ok")

    @app.route("/files/<path:_name>", methods=["GET", "HEAD"], provide_automatic_options=False)
    def serve_file(_name):
        deadline = g.deadline
        environ = request.environ
        name, status = name_from_target(request_target(environ))
        if name is None:
            return text_response(status, "bad file name" if status == 400 else "not found")

        # Admitted before any database work, or refused after its wait
        # (admission.py): at the door, or here for a request with a body.
        admitted = environ.pop(ADMITTED_KEY, None)
        if admitted is None:
            admitted = admission.enter(deadline)
        if admitted is None:
            refusals.count()
            return server_busy()
        response = None
        try:
            if work_units:  # the A/B's known change (extra_work.py), as admitted work of the request
                g.extra_work = extra_work(work_units)  # kept, as a real computation's result would be
            response = answer(name, deadline)
            return response
        finally:
            # A 503 is the store failing or the deadline passing: the limit comes down.
            admission.finished(admitted, failed=response is None or response.status_code == 503)

    def answer(name: str, deadline: float) -> Response:
        """The answer to a GET or HEAD of `name`: its database work (the
        lookup and the first piece of a body) is over when it returns."""
        try:
            with store.within(deadline):
                stored = store.find(name)
        except StoreError as error:
            log(f"{store.kind} unavailable looking up {name!r}: {error!r}")
            return unavailable()
        except CorruptFile as error:
            return corrupt(name, error)
        if stored is None:
            return text_response(404, "not found")

        length = stored.length
        validators = {"Last-Modified": http_date(stored.last_modified), "ETag": stored.etag}
        precondition = precondition_status(request.headers, stored.etag, stored.last_modified)
        if precondition == 412:
            return text_response(412, "precondition failed")
        if precondition == 304:
            return Response(None, 304, validators)

        status, start, end = 200, 0, length
        headers = {"Content-Type": content_type_for(name, stored.content_type), **validators}
        range_header = request.headers.get("Range")
        if range_header is not None and is_byte_range(range_header):
            applies = if_range_allows(request.headers.get("If-Range"), stored.etag, stored.last_modified)
            ranges = parse_range(range_header, length) if applies else None
            if ranges == NOT_SATISFIABLE:
                return text_response(416, "range not satisfiable", {"Content-Range": f"bytes */{length}"})
            # Several ranges: nginx answers multipart/byteranges; we answer
            # the whole file with 200, which RFC 9110 allows (a server may
            # ignore Range), and no download tool needs multipart.
            if ranges is not None and len(ranges) == 1:
                status, (start, end) = 206, ranges[0]
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{length}"
        if status == 200:
            headers["Accept-Ranges"] = "bytes"
        headers["Content-Length"] = str(end - start)

        if request.method == "HEAD" or start == end:
            return Response(None, status, headers)
        if not open_streams.acquire(timeout=max(deadline - time.monotonic(), 0)):
            log(f"no place of FLASK_MAX_OPEN_STREAMS ({streams_limit}) free within REQUEST_DEADLINE_MS "
                f"({deadline_seconds * 1000:.0f} ms) for {name!r}: 503")
            return unavailable()
        # The first chunk is read before the status line goes out, so that a
        # store failure there is still a clean 503; later failures can only
        # cut the connection short (Content-Length tells the client).
        body = stored_body(store, stored, start, end)
        try:
            with store.within(deadline):
                first_piece = next(body)
        except BaseException as error:
            body.close()
            open_streams.release()
            if isinstance(error, CorruptFile):
                return corrupt(name, error)
            if not isinstance(error, StoreError):
                raise
            log(f"cannot read {name!r} from {store.kind}: {error!r}")
            return unavailable()
        # The server closes the iterable when the response ends, sent or cut
        # (werkzeug hands a direct_passthrough iterable over as is, so its
        # own call_on_close would never run): the place is given back then.
        pieces = ClosingIterator(chain((first_piece,), body), [open_streams.release, body.close])
        return Response(pieces, status, headers, direct_passthrough=True)

    def corrupt(name: str, error: CorruptFile) -> Response:
        # A stored file that breaks GridFS's rules will not heal on retry:
        # a 500 (nginx-gridfs's answer), no Retry-After, the connection closed.
        log(f"corrupt stored file {name!r}: {error}")
        return text_response(500, "corrupt stored file")

    def stored_body(store: FileStore, stored, start: int, end: int):
        pieces = store.read(stored, start, end)
        started = False  # a failure before the first piece is the caller's 503, logged there
        try:
            for piece in pieces:
                yield piece
                started = True
        except (StoreError, CorruptFile) as error:
            if started:  # the head is out: the server cuts the connection short of Content-Length
                log(f"{store.kind} failed midway through a body: {error!r}")
            raise
        finally:
            pieces.close()

    @app.errorhandler(405)
    def method_not_allowed(error):
        return text_response(405, "method not allowed", {"Allow": "GET, HEAD"})

    @app.errorhandler(404)
    def not_found(error):
        return text_response(404, "not found")

    return app
