"""Message framing (RFC 9112 6 and 5.1-5.2), judged against nginx-static:
where a request's body ends decides where the next request begins, so a
server that reads it otherwise than its neighbours answers requests nobody
sent (request smuggling). Each case sends one request on a kept-alive
connection, then a second request for the file (with Connection: close);
the outcome is the statuses answered on the connection and how it ended:
"400 then closed" (the second request never read), "200 200 then closed"
(both answered). A path must give nginx's outcome, or an alternative the
RFC allows, named at its case."""
import re
import socket
from dataclasses import dataclass

from .raw_http import CaseResult, Server

# Any version: gunicorn answers "HTTP/2.0 505" to an HTTP/2.0 request line
# (the status is the contract here, as in the bad-input cases).
_STATUS_LINE = re.compile(rb"HTTP/\d\.\d (\d{3})[^\r\n]*\r\n")


@dataclass(frozen=True)
class Framing:
    case: str
    raw: bytes                      # the first request, body and all
    alternative: str | None = None  # another outcome the RFC allows


def statuses_in(data: bytes) -> list[int]:
    """The status of each answer in `data`, read in order: each head, then
    its body by Content-Length or chunks (the answers are to GETs; 204, 304
    and 1xx have none). Stops at the first thing that is not an answer."""
    statuses = []
    while (match := _STATUS_LINE.match(data)) is not None:
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            break
        status = int(match.group(1))
        statuses.append(status)
        headers = {}
        for line in data[match.end():head_end].split(b"\r\n"):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        rest = data[head_end + 4:]
        if status in (204, 304) or status < 200:
            data = rest
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            data = _after_chunks(rest)
        elif headers.get(b"content-length", b"").isdigit():
            data = rest[int(headers[b"content-length"]):]
        else:  # close-delimited (or a length that is no number): the rest is this body
            break
    return statuses


def _after_chunks(data: bytes) -> bytes:
    while True:
        size_line, found, data = data.partition(b"\r\n")
        if not found:
            return b""
        try:
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
        except ValueError:  # not chunks after all: nothing more to read
            return b""
        if size == 0:
            _, _, data = data.partition(b"\r\n")  # no trailers in the lab's answers
            return data
        data = data[size + 2:]


def outcome(server: Server, raw: bytes) -> str:
    """What `server` answered on one connection to `raw`, and how the
    connection ended ("then closed", or "then timeout" after server.timeout)."""
    data, ending = b"", "closed"
    try:
        with socket.create_connection((server.host, server.port), timeout=server.timeout) as sock:
            sock.sendall(raw)
            while chunk := sock.recv(1 << 20):
                data += chunk
    except socket.timeout:
        ending = "timeout"
    except ConnectionError:
        ending = "reset"
    statuses = statuses_in(data)
    return " ".join(map(str, statuses)) + f" then {ending}" if statuses else f"nothing then {ending}"


def framing_requests(files: list[dict]) -> list[Framing]:
    """The cases, each a GET of the first file framed one way, followed on
    the same connection by a plain GET of it."""
    name = files[0]["name"]
    follow = f"GET /files/{name} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n".encode()

    def get(*headers: str, body: bytes = b"", version: str = "HTTP/1.1", host: str = "lab") -> bytes:
        head = "\r\n".join([f"GET /files/{name} {version}", f"Host: {host}", *headers]) + "\r\n\r\n"
        return head.encode("latin-1") + body + follow

    # A request hidden in a body that a server reading Content-Length would
    # take for the next one: answered, it would be a 404 nobody asked for.
    hidden = b"GET /files/gridfs-lab-smuggled.bin HTTP/1.1\r\nHost: lab\r\n\r\n"
    chunks = b"5\r\nhello\r\n0\r\n\r\n"
    # RFC 9112 6.1: a server MAY reject a request with both Content-Length
    # and Transfer-Encoding, or read it by Transfer-Encoding alone; either
    # way it MUST close the connection after (Apache does the latter).
    by_te_then_closed = "200 then closed"
    return [
        Framing("Content-Length and Transfer-Encoding",
                get("Content-Length: 5", "Transfer-Encoding: chunked", body=b"0\r\n\r\n"), by_te_then_closed),
        Framing("a request hidden behind Content-Length and Transfer-Encoding",
                get("Transfer-Encoding: chunked", "Content-Length: 4", body=b"0\r\n\r\n" + hidden),
                by_te_then_closed),
        # 6.1: in HTTP/1.0, Transfer-Encoding makes the framing faulty: the
        # same choice, and the same close.
        Framing("Transfer-Encoding in HTTP/1.0", get("Transfer-Encoding: chunked", body=b"0\r\n\r\n",
                                                     version="HTTP/1.0"), by_te_then_closed),
        # 6.3: chunked not the final coding of a request: 400 and close
        # (RFC 9112); nginx answers 501.
        Framing("chunked not the final coding", get("Transfer-Encoding: chunked, gzip", body=chunks),
                "400 then closed"),
        # 6.1: a coding the server does not understand: 501 (SHOULD), then
        # close; 400 refuses as safely.
        Framing("an unknown transfer coding", get("Transfer-Encoding: identity"), "400 then closed"),
        Framing("a coding before chunked", get("Transfer-Encoding: gzip, chunked", body=chunks)),
        # 6.3: an invalid Content-Length is an unrecoverable error: 400, close.
        Framing("two different Content-Length", get("Content-Length: 0", "Content-Length: 5", body=b"hello")),
        Framing("Content-Length not a number", get("Content-Length: abc")),
        Framing("a negative Content-Length", get("Content-Length: -1")),
        # 5.1: whitespace between a field name and its colon: 400.
        Framing("a space before the colon", get("Content-Length : 5", body=b"hello")),
        # The body read and passed over: the next request is the next one.
        Framing("a body by Content-Length, then a second request", get("Content-Length: 5", body=b"hello")),
        Framing("a chunked body, then a second request", get("Transfer-Encoding: chunked", body=chunks)),
        Framing("a chunk extension", get("Transfer-Encoding: chunked", body=b"5;ext=1\r\nhello\r\n0\r\n\r\n")),
        Framing("a bad chunk size", get("Transfer-Encoding: chunked", body=b"zz\r\nhello\r\n0\r\n\r\n")),
        # 5.2: obs-fold is refused (400) or each fold read as a space.
        Framing("obs-fold, then a second request", get("X-A: a", " folded"), "200 200 then closed"),
        # Refusals end the connection, as nginx ends it.
        Framing("a 400 closes the connection", get(host="la b")),
        Framing("a 505 closes the connection", get(version="HTTP/2.0")),
    ]


def framing_cases(ref: Server, tgt: Server, files: list[dict]) -> list[CaseResult]:
    results = []
    for request in framing_requests(files):
        expected, got = outcome(ref, request.raw), outcome(tgt, request.raw)
        passed = got == expected or got == request.alternative
        if request.alternative is not None:
            expected += f" (or {request.alternative})"
        results.append(CaseResult(f"framing: {request.case}", expected, got, passed))
    return results
