"""The framing cases' reader (bench.checks.framing.statuses_in), a pure
function, on answers captured from real servers (tests/fixtures/framing/:
nginx and Apache from this machine's Debian packages, gunicorn 27 from the
Flask path), and the cases' own shape."""
from pathlib import Path

from bench.checks.framing import framing_requests, statuses_in

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "framing"


def captured(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_two_answers_on_one_connection_are_both_read_past_their_bodies():
    # nginx: a GET with a 5-byte body, then a GET of a 1 KiB file whose
    # bytes are 0..255 four times (CR and LF among them)
    assert statuses_in(captured("nginx-200-200.raw")) == [200, 200]
    assert statuses_in(captured("httpd-200-200.raw")) == [200, 200]


def test_a_refusal_then_the_close_is_one_answer():
    assert statuses_in(captured("nginx-400.raw")) == [400]
    # Apache reads Content-Length and chunked by the chunks, answers, and
    # closes: the request hidden in the body is never answered
    assert statuses_in(captured("httpd-200-closed.raw")) == [200]


def test_an_answer_with_another_version_in_its_status_line_counts():
    assert statuses_in(captured("gunicorn-505.raw")) == [505]


def test_chunked_answers_are_read_past_their_last_chunk():
    first = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nHTTP/\r\n3\r\n1.1\r\n0\r\n\r\n"
    second = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n"
    assert statuses_in(first + second) == [200, 404]
    assert statuses_in(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n" + second) == [304, 404]


def test_what_is_not_an_answer_stops_the_reading():
    assert statuses_in(b"") == []
    assert statuses_in(b"garbage\r\n\r\n") == []
    assert statuses_in(b"HTTP/1.1 200 OK\r\nContent-Le") == []  # a head cut short
    assert statuses_in(b"HTTP/1.1 200 OK\r\n\r\nclose-delimited HTTP/1.1 200 OK\r\n\r\n") == [200]
    # what a server under test sends is untrusted: a bad length or chunk size ends the reading
    assert statuses_in(b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nHTTP/1.1 200 OK\r\n\r\n") == [200]
    assert statuses_in(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") == [200]


def test_every_case_asks_for_the_file_again_after_its_request():
    cases = framing_requests([{"name": "1KB.bin"}])
    assert len({c.case for c in cases}) == len(cases) >= 15
    follow = b"GET /files/1KB.bin HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
    assert all(c.raw.endswith(follow) and c.raw.count(b"GET /files/1KB.bin ") == 2 for c in cases)
    assert all(c.alternative is None or c.alternative.endswith(" then closed") for c in cases)
