"""HTTP conformance of a serving path, judged against nginx-static's answer to
the very same request for the same file on disk.

Functional cases (full GET, headers, HEAD, every Range form, If-Range,
conditional GETs, 404) must answer as nginx does: same status, same
Content-Range and Content-Length, same bytes. Hostile requests (bad methods,
malformed request lines, huge headers, bad Range syntax, traversal attempts,
bad encodings) only need to be refused safely: never a server error, never a
hang, and a 2xx only where nginx also answers 2xx, with nginx's bytes.
Bad input that HTTP defines an answer for (repeated or malformed Host,
absolute-form targets, HTTP versions, an HTTP/0.9 request line) must get
nginx's status, and nginx's bytes where it serves the file. Message
framing (checks/framing.py) must end each request where nginx ends it.
A GridFS path must also refuse the documents that break GridFS's rules
(labfiles/bad_documents.py; the seed writes them): a 500, or a cut after the
head where only a later chunk lies; never a 503, a hang or a crash.

Run on its own:  python -m bench.checks.conformance --reference URL --target URL [--files-dir DIR]
"""
import argparse
import json
import socket
import sys
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path

from labfiles.bad_documents import CONTENT as BAD_DOCUMENT_CONTENT, DOCUMENTS as BAD_DOCUMENTS, LATER_CHUNK

from .framing import framing_cases
from .raw_http import Answer, CaseResult, Server, parse_answer

CHUNK = 255 * 1024  # GridFS default chunk size: ranges across it matter
SERVER_ERRORS = {500, 502, 503, 504}


# --- functional cases -------------------------------------------------------

def _range_cases(size: int) -> list[tuple[str, str]]:
    """(case name, Range header) for a file of `size` bytes."""
    cases = [("first byte", "bytes=0-0"), ("first 100 bytes", "bytes=0-99"),
             ("suffix 100", "bytes=-100"), ("last byte", "bytes=-1"),
             ("open end", f"bytes={size // 2}-"), ("end past length", f"bytes=0-{size + 1000}"),
             ("start at length", f"bytes={size}-"), ("beyond end", f"bytes={size + 5}-{size + 10}"),
             ("two ranges", "bytes=0-0,5-9")]
    if size > CHUNK + 100:
        cases.append(("across a chunk boundary", f"bytes={CHUNK - 50}-{CHUNK + 50}"))
    return cases


def _same(case: str, ref: Answer, got: Answer) -> CaseResult:
    return CaseResult(case, ref.describe(), got.describe(), ref.describe() == got.describe())


def _headers_summary(answer: Answer) -> str:
    etag = answer.header("etag") or ""
    strong = "strong" if etag.startswith('"') else ("weak" if etag else "none")
    try:
        modified = "date" if parsedate_to_datetime(answer.header("last-modified") or "") else "none"
    except (TypeError, ValueError):
        modified = "unparsable"
    return (f"Content-Type={answer.header('content-type')} Accept-Ranges={answer.header('accept-ranges')} "
            f"ETag={strong} Last-Modified={modified}")


def functional_cases(ref: Server, tgt: Server, files: list[dict]) -> list[CaseResult]:
    results = []
    for f in files:
        path = f"/files/{f['name']}"
        name = f["name"]
        ref_full, tgt_full = ref.request("GET", path), tgt.request("GET", path)
        results.append(_same(f"GET {name}", ref_full, tgt_full))
        results.append(CaseResult(f"headers {name}", _headers_summary(ref_full), _headers_summary(tgt_full),
                                  _headers_summary(ref_full) == _headers_summary(tgt_full)))
        results.append(_same(f"HEAD {name}", ref.request("HEAD", path), tgt.request("HEAD", path)))
        for case, value in _range_cases(f["size"]):
            r, t = ref.request("GET", path, {"Range": value}), tgt.request("GET", path, {"Range": value})
            result = _same(f"Range {case} ({value}) {name}", r, t)
            if case == "two ranges" and not result.passed:
                # A full 200 is a valid answer to a multi-range request.
                result.passed = t.status == 200 and t.body == ref_full.body
            results.append(result)
        results += _validator_cases(ref, tgt, path, name, ref_full, tgt_full)
    missing = "/files/gridfs-lab-no-such-file.bin"
    results.append(_same("GET missing file", ref.request("GET", missing), tgt.request("GET", missing)))
    return results


def _validator_cases(ref, tgt, path, name, ref_full, tgt_full) -> list[CaseResult]:
    """Each server is asked with its own ETag and Last-Modified."""
    results = []
    variants = [
        ("If-None-Match own ETag", lambda a: {"If-None-Match": a.header("etag") or '"none"'}),
        ("If-None-Match other ETag", lambda a: {"If-None-Match": '"gridfs-lab-other"'}),
        ("If-Modified-Since own Last-Modified", lambda a: {"If-Modified-Since": a.header("last-modified") or ""}),
        ("If-Modified-Since 1970", lambda a: {"If-Modified-Since": "Thu, 01 Jan 1970 00:00:01 GMT"}),
        ("If-Range own ETag", lambda a: {"Range": "bytes=0-9", "If-Range": a.header("etag") or '"none"'}),
        ("If-Range other ETag", lambda a: {"Range": "bytes=0-9", "If-Range": '"gridfs-lab-other"'}),
    ]
    for case, headers in variants:
        r, t = ref.request("GET", path, headers(ref_full)), tgt.request("GET", path, headers(tgt_full))
        results.append(_same(f"{case} {name}", r, t))
    return results


# --- hostile requests ---------------------------------------------------------

@dataclass(frozen=True)
class Hostile:
    case: str
    raw: bytes
    # A well-formed GET of the file but for a limit each server chooses
    # (header sizes, Range syntax): the whole file is a safe answer too.
    get_of_file: bool = False


def hostile_requests(files: list[dict]) -> list[Hostile]:
    """At least 200 hostile requests against the first file."""
    name = files[0]["name"]
    path = f"/files/{name}"

    def req(line: str, *headers: str) -> bytes:
        return ("\r\n".join([line, "Host: lab", "Connection: close", *headers]) + "\r\n\r\n").encode("latin-1")

    cases = []
    for method in ("PUT", "POST", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "PROPFIND",
                   "FOO", "get", "GET\x00", "G" * 300):
        cases.append(Hostile(f"method {method[:20]!r}", req(f"{method} {path} HTTP/1.1")))
    for label, line in [("HTTP/9.9", f"GET {path} HTTP/9.9"), ("HTTP/1.x", f"GET {path} HTTP/1.x"),
                        ("no leading slash", f"GET files/{name} HTTP/1.1"),
                        ("control char in path", f"GET {path}\x01 HTTP/1.1"),
                        ("space in path", "GET /files/a b HTTP/1.1"),
                        ("tab separators", f"GET\t{path}\tHTTP/1.1"),
                        ("absolute URI", f"GET http://elsewhere.invalid{path} HTTP/1.1"),
                        ("asterisk", "GET * HTTP/1.1"), ("empty target", "GET  HTTP/1.1"),
                        ("lowercase version", f"GET {path} http/1.1"),
                        ("garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00")]:
        cases.append(Hostile(f"request line: {label}", req(line)))
    cases.append(Hostile("request line: no Host", f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode()))
    cases.append(Hostile("request line: bare LF", f"GET {path} HTTP/1.1\nHost: lab\nConnection: close\n\n".encode()))
    for size in (4_000, 9_000, 20_000, 70_000, 1_100_000):
        cases.append(Hostile(f"header value of {size} bytes",
                             req(f"GET {path} HTTP/1.1", "X-Big: " + "a" * size), get_of_file=True))
    for count in (50, 200, 1000):
        cases.append(Hostile(f"{count} headers",
                             req(f"GET {path} HTTP/1.1", *[f"X-H{i}: v" for i in range(count)]), get_of_file=True))
    cases.append(Hostile("header without colon", req(f"GET {path} HTTP/1.1", "NoColonHere")))
    # RFC 9112 5.2: a server rejects obs-fold (nginx: 400) or unfolds it
    # into SP (Apache, even with HttpProtocolOptions Strict): both are safe.
    cases.append(Hostile("obsolete line folding", req(f"GET {path} HTTP/1.1", "X-A: a", " folded"),
                         get_of_file=True))
    for value in ("bytes=", "bytes=abc", "bytes=5-2", "bytes=--1", "items=0-1", "bytes=0-1,,",
                  "bytes= 0-1", "bytes=-0", "bytes=99999999999999999999-", "bytes=0-99999999999999999999",
                  "bytes=1-1-1", "bytes=0x10-0x20", "Bytes=0-1", "bytes=" + ",".join(["0-0"] * 300)):
        cases.append(Hostile(f"Range {value[:30]!r}", req(f"GET {path} HTTP/1.1", f"Range: {value}"),
                             get_of_file=True))
    for value in ("bytes=0-0", "nonsense"):
        cases.append(Hostile(f"Range with bad If-Range {value}",
                             req(f"GET {path} HTTP/1.1", f"Range: {value}", "If-Range: garbage"),
                             get_of_file=True))
    traversal = ["../", "..%2f", "%2e%2e/", "%2e%2e%2f", "%2E%2E%2F", "..\\", "..%5c", "%2e%2e%5c",
                 "%252e%252e%252f", ".%2e/", "%2e./", "%c0%ae%c0%ae/", "....//", "..;/", "/..",
                 "%2f..%2f", "./", "%00/../", "..%00/", "..%c0%af"]
    goals = ["etc/passwd", "../../../../etc/passwd", "proc/self/environ", "windows/win.ini",
             "root/.ssh/id_rsa", "data/files/manifest.json", f"files/{name}", name]
    for prefix in traversal:
        for goal in goals:
            cases.append(Hostile(f"traversal {prefix}{goal}", req(f"GET /files/{prefix}{goal} HTTP/1.1")))
    for label, target in [("NUL", f"{name}%00"), ("NUL before suffix", f"{name}%00.png"),
                          ("bad percent %zz", "%zz"), ("lone percent", "%"), ("truncated %e2%82", "%e2%82"),
                          ("invalid UTF-8 %ff", "%ff%fe"), ("backslash", f"..\\..\\{name}"),
                          ("encoded slash", f"a%2f{name}"), ("255-byte name", "a" * 255),
                          ("300-byte name", "a" * 300), ("5000-byte name", "a" * 5000),
                          ("unicode name", "%e2%82%ac.bin"), ("query", f"{name}?x=../../etc/passwd"),
                          ("fragment", f"{name}#frag"), ("double slash", f"/{name}"),
                          ("trailing slash", f"{name}/"), ("directory", ""), ("dot", "."), ("dotdot", "..")]:
        cases.append(Hostile(f"name: {label}", req(f"GET /files/{target} HTTP/1.1")))
    return cases


def _safe(request: Hostile, ref: Answer, got: Answer, full_body: bytes) -> bool:
    """Never a hang or a server error; a 2xx only where nginx also answered
    2xx, with nginx's bytes, or the whole file for a GET of it."""
    if got.note == "timeout" or got.status in SERVER_ERRORS:
        return False
    if got.status is None and got.body:  # bytes without a status line: only nginx's
        return ref.status is None and got.body == ref.body
    if request.get_of_file and got.status == 200 and got.body == full_body:
        return True
    if got.status is None or got.status // 100 != 2:
        return True
    if ref.status is None or ref.status // 100 != 2:
        return False
    return got.content() == ref.content()


def hostile_cases(ref: Server, tgt: Server, files: list[dict]) -> list[CaseResult]:
    results = []
    full_body = ref.request("GET", f"/files/{files[0]['name']}").body
    for request in hostile_requests(files):
        r, t = ref.raw(request.raw), tgt.raw(request.raw)
        passed = _safe(request, r, t, full_body)
        results.append(CaseResult(f"hostile: {request.case}", f"safe refusal or nginx's answer ({r.describe()})",
                                  t.describe(), passed))
    return results


# --- bad input with a defined answer ------------------------------------------

@dataclass(frozen=True)
class BadInput:
    case: str
    raw: bytes
    # A refusal accepted in place of nginx's answer, where HTTP lets a server
    # refuse what nginx serves and a path's server cannot answer otherwise
    # (why: the comment at the case).
    refusal: int | None = None


def bad_input_requests(files: list[dict]) -> list[BadInput]:
    """Requests RFC 9112 and nginx give one answer: the status, and the file
    where nginx serves it (nginx 1.22: a second or malformed Host is a 400;
    an absolute-form target is served whatever its host; HTTP/1.x with any
    minor version is served as HTTP/1.1, another major version is a 505; an
    HTTP/0.9 request line gets the body alone, without a status line)."""
    name = files[0]["name"]
    path = f"/files/{name}"

    def req(line: str, *headers: str) -> bytes:
        return ("\r\n".join([line, *headers, "Connection: close"]) + "\r\n\r\n").encode("latin-1")

    get = f"GET {path} HTTP/1.1"
    cases = [
        BadInput("two Host headers", req(get, "Host: lab", "Host: lab")),
        BadInput("two different Host headers", req(get, "Host: lab", "Host: elsewhere.invalid")),
        BadInput("Host with a slash", req(get, "Host: lab/x")),
        BadInput("Host with a space", req(get, "Host: la b")),
        BadInput("Host with an empty label", req(get, "Host: lab..invalid")),
        BadInput("Host with a port", req(get, "Host: lab:8080")),
        BadInput("absolute-form target", req(f"GET http://lab{path} HTTP/1.1", "Host: lab")),
        BadInput("absolute-form target, another host",
                 req(f"GET http://elsewhere.invalid{path} HTTP/1.1", "Host: lab")),
        BadInput("absolute-form target with a port", req(f"GET http://lab:8080{path} HTTP/1.1", "Host: lab")),
        BadInput("absolute-form target of a missing file",
                 req("GET http://lab/files/gridfs-lab-no-such-file.bin HTTP/1.1", "Host: lab")),
        BadInput("HTTP/1.0 without Host", req(f"GET {path} HTTP/1.0")),
        # RFC 9112 2.3: a higher minor version SHOULD be served as the
        # highest known; Node 20+'s parser (llhttp 9) refuses any but 1.0,
        # 1.1 and 2.0 with 400 before the app sees it, and only its
        # insecureHTTPParser, which also relaxes header checks, would not.
        BadInput("HTTP/1.2", req(f"GET {path} HTTP/1.2", "Host: lab"), refusal=400),
        BadInput("HTTP/2.0", req(f"GET {path} HTTP/2.0", "Host: lab")),
        BadInput("HTTP/3.0", req(f"GET {path} HTTP/3.0", "Host: lab"), refusal=400),  # llhttp, as above
        BadInput("lowercase http/1.1", req(f"GET {path} http/1.1", "Host: lab")),
        # HTTP/0.9 is obsolete (RFC 9112 keeps no grammar for it). nginx
        # (and Apache) answer it with the body alone; gunicorn's parser
        # refuses a request line without a version, and Node's responses
        # always have a status line. Sent with an empty line: after a bare
        # request line Node's parser waits for headers (until its timeout).
        BadInput("HTTP/0.9 request line", f"GET {path}\r\n\r\n".encode("latin-1"), refusal=400),
    ]
    return cases


def bad_input_cases(ref: Server, tgt: Server, files: list[dict]) -> list[CaseResult]:
    results = []
    for request in bad_input_requests(files):
        result = _same(f"bad input: {request.case}", ref.raw(request.raw), tgt.raw(request.raw))
        if request.refusal is not None:
            result.expected += f" or {request.refusal}"
            result.passed = result.passed or result.got == str(request.refusal)
        results.append(result)
    return results


# --- documents that break GridFS's rules (GridFS paths only) ------------------

# The paths that read GridFS themselves (an A/B twin is named <path>-b).
GRIDFS_PATHS = frozenset({"nginx-gridfs", "flask", "node", "gridfs-fuse"})
# The documents that break GridFS's rules (BAD_DOCUMENTS) are labfiles/bad_documents.py's: the seed's list too.
MAX_BAD_ANSWER = 1 << 20  # more than this of a 10-byte file is a failure, and reading stops


def serves_gridfs(target: str) -> bool:
    return target.removesuffix("-b") in GRIDFS_PATHS


def _get_until_closed(server: Server, path: str) -> Answer:
    """A GET's answer as far as it went, its note how it ended: "closed",
    "reset", "timeout" or "too long" (Server.request drops what came before
    a reset, and trusts Content-Length)."""
    request = f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\nConnection: close\r\n\r\n".encode("latin-1")
    data, end = b"", "closed"
    try:
        with socket.create_connection((server.host, server.port), timeout=server.timeout) as sock:
            sock.sendall(request)
            while chunk := sock.recv(65536):
                data += chunk
                if len(data) > MAX_BAD_ANSWER:
                    end = "too long"
                    break
    except socket.timeout:
        end = "timeout"
    except ConnectionError:
        end = "reset"
    if b"\r\n\r\n" not in data:
        return Answer(None, {}, b"", end)
    answer = parse_answer(data, head=False)
    answer.note = end
    return answer


def _bad_document_outcome(answer: Answer) -> str:
    if answer.status is None:
        return answer.note
    if answer.status != 200:
        return str(answer.status)
    prefix = "a prefix" if BAD_DOCUMENT_CONTENT.startswith(answer.body) else "other bytes"
    return (f"200 Content-Length {answer.header('content-length')}, then {len(answer.body)} bytes "
            f"({prefix}), {answer.note}")


def bad_document_cases(ref: Server, tgt: Server, files: list[dict]) -> list[CaseResult]:
    """Each bad document: the answer where its lie shows calls for; then the
    target still serves the first good file as nginx does (the process alive)."""
    results = []
    for name, bad in BAD_DOCUMENTS.items():
        answer = _get_until_closed(tgt, f"/files/{name}")
        passed = answer.status == 500
        expected = "500 before the head"
        if bad.lie_in == LATER_CHUNK:
            expected += f", or 200 Content-Length {len(BAD_DOCUMENT_CONTENT)} cut short after a prefix"
            passed = passed or (answer.status == 200 and answer.note in ("closed", "reset")
                                and answer.header("content-length") == str(len(BAD_DOCUMENT_CONTENT))
                                and len(answer.body) < len(BAD_DOCUMENT_CONTENT)
                                and BAD_DOCUMENT_CONTENT.startswith(answer.body))
        results.append(CaseResult(f"bad document: {name} (a lie in its {bad.lie_in})", expected,
                                  _bad_document_outcome(answer), passed))
    path = f"/files/{files[0]['name']}"
    results.append(_same("bad document: the next good file served", ref.request("GET", path),
                         tgt.request("GET", path)))
    return results


def check(reference_url: str, target_url: str, files: list[dict], bad_documents: bool = False) -> list[CaseResult]:
    """bad_documents: also the cases of the documents the seed writes into
    GridFS (labfiles/bad_documents.py), for a path that serves GridFS."""
    ref, tgt = Server(reference_url), Server(target_url)
    return (functional_cases(ref, tgt, files) + hostile_cases(ref, tgt, files) + bad_input_cases(ref, tgt, files)
            + framing_cases(ref, tgt, files) + (bad_document_cases(ref, tgt, files) if bad_documents else []))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="nginx-static's base URL")
    parser.add_argument("--target", required=True, help="the serving path's base URL")
    parser.add_argument("--files-dir", default="/data/files", help="where manifest.json is")
    parser.add_argument("--json", action="store_true", help="print every case as JSON")
    parser.add_argument("--gridfs", action="store_true",
                        help="the target serves GridFS: also the seed's documents that break its rules")
    args = parser.parse_args(argv)
    files = json.loads((Path(args.files_dir) / "manifest.json").read_text())["files"]
    results = check(args.reference, args.target, files, bad_documents=args.gridfs)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    for r in results:
        if not r.passed:
            print(f"FAIL {r.case}\n  expected: {r.expected}\n  got:      {r.got}")
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
