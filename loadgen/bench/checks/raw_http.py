"""A raw HTTP/1.1 client and the answers it reads, for the checks that judge
a path against nginx-static byte for byte (conformance.py, framing.py):
their own module so that each check builds on it without importing the
other."""
import hashlib
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

HTTP09 = "HTTP/0.9 answer"  # the note of an answer without a status line


@dataclass
class Answer:
    status: int | None          # None: closed without an answer, or timed out
    headers: dict
    body: bytes
    note: str = ""              # "closed" or "timeout" when status is None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def content(self) -> bytes:
        """The body, with a multipart/byteranges answer reduced to its parts
        (Content-Range and bytes): its boundary is random per answer."""
        ctype = self.header("content-type") or ""
        if not ctype.startswith("multipart/byteranges") or "boundary=" not in ctype:
            return self.body
        boundary = b"--" + ctype.split("boundary=", 1)[1].strip('"').encode()
        parts = []
        for part in self.body.split(boundary)[1:]:
            head, _, data = part.partition(b"\r\n\r\n")
            ranges = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-range")]
            if ranges:
                parts.append(ranges[0].lower() + b"\n" + data.removesuffix(b"\r\n"))
        return b"multipart:" + b"\n".join(parts)

    def describe(self) -> str:
        if self.status is None:
            if self.body:  # HTTP/0.9: the body alone
                return f"{self.note} body sha256:{hashlib.sha256(self.body).hexdigest()[:12]} ({len(self.body)} bytes)"
            return self.note
        parts = [str(self.status)]
        if self.header("content-range"):
            parts.append(self.header("content-range"))
        if self.status >= 400:  # error pages differ by server; status and range are the contract
            return " ".join(parts)
        content = self.content()
        if content is self.body:  # multipart lengths depend on the boundary
            parts.append(f"length={self.header('content-length')}")
        if content:
            parts.append(f"body sha256:{hashlib.sha256(content).hexdigest()[:12]} ({len(self.body)} bytes)")
        return " ".join(parts)


@dataclass
class CaseResult:
    case: str
    expected: str
    got: str
    passed: bool


class Server:
    """A raw HTTP/1.1 client: sends exactly the bytes a case needs, one
    connection per request, and reads the answer within a timeout."""

    def __init__(self, url: str, timeout: float = 10.0):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout = timeout

    def raw(self, request: bytes, head: bool = False) -> Answer:
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout) as sock:
                sock.sendall(request)
                return _read_answer(sock, head)
        except socket.timeout:
            return Answer(None, {}, b"", "timeout")
        except ConnectionError:
            return Answer(None, {}, b"", "closed")

    def request(self, method: str, path: str, headers: dict | None = None) -> Answer:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        return self.raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), head=method == "HEAD")


def _read_answer(sock: socket.socket, head: bool) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return Answer(None, {}, b"", "closed") if not data else parse_answer(data, head)
        data += chunk
        if len(data) >= 5 and not data.startswith(b"HTTP/"):
            # No status line: an HTTP/0.9 answer, the body alone up to the close.
            return Answer(None, {}, data + _read_to_close(sock), HTTP09)
    answer = parse_answer(data, head)
    length = answer.header("content-length")
    if head or answer.status in (204, 304) or length is None and answer.header("transfer-encoding") is None:
        # no body expected, or a close-delimited body
        if not head and answer.status not in (204, 304) and length is None:
            answer.body += _read_to_close(sock)
        return answer
    if length is not None:
        want = int(length)
        while len(answer.body) < want:
            chunk = sock.recv(min(1 << 20, want - len(answer.body)))
            if not chunk:
                break
            answer.body += chunk
    else:
        answer.body = _dechunk(answer.body + _read_to_close(sock))
    return answer


def _read_to_close(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(1 << 20):
        out += chunk
    return out


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


def parse_answer(data: bytes, head: bool) -> Answer:
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Answer(None, {}, b"", f"not HTTP: {lines[0][:40]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(status, headers, b"" if head else body)
