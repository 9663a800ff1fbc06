"""The Range header, answered as nginx's range filter answers it.

Hand-ported from ngx_http_range_parse because Werkzeug's parser
(parse_range_header + Range.range_for_length, what Response.make_conditional
uses) answers otherwise in these cases of tests/test_serving_paths.py's
RANGE_CASES, checked against nginx (found by running both on every case):
  - malformed or backwards values ("bytes=abc", "bytes=1-2-3", "bytes=--1",
    "bytes=0-1;x", "bytes=5-2", "bytes=-0"): nginx 416, Werkzeug ignores
    the header (200);
  - "bytes=5-2,10-20": nginx drops the backwards range (206 for 10-20),
    Werkzeug ignores the header (200);
  - a suffix longer than the file ("bytes=-99999999"): nginx 206 with the
    whole file, Werkzeug 416;
  - any range of an empty file: nginx 200, Werkzeug 416;
  - a value beyond off_t ("bytes=0-99999999999999999999999"): nginx 416,
    Werkzeug clamps it (206).
Werkzeug agrees on the well-formed cases of the conformance suite.
"""
MAX_OFFSET = 2**63 - 1  # nginx's off_t limit for Range values
NOT_SATISFIABLE = "not satisfiable"


def _digits(value: str, i: int) -> tuple[int | None, int]:
    j = i
    while j < len(value) and "0" <= value[j] <= "9":
        j += 1
    digits = value[i:j].lstrip("0")
    if len(digits) > 19 or int(digits or "0") > MAX_OFFSET:
        return None, j
    return int(digits or "0"), j


def _spaces(value: str, i: int) -> int:
    while i < len(value) and value[i] == " ":
        i += 1
    return i


def is_byte_range(value: str) -> bool:
    """nginx's range filter only looks at headers starting "bytes=" (any case)."""
    return len(value) >= 7 and value[:6].lower() == "bytes="


def parse_range(value: str, length: int):
    """A port of ngx_http_range_parse for a header starting with "bytes=".

    Returns a list of (start, end_exclusive), NOT_SATISFIABLE (416), or None
    when the header is to be ignored (200), exactly where nginx does."""
    ranges, total, i, n = [], 0, 6, len(value)
    while True:
        i = _spaces(value, i)
        suffix, open_ended, start, end = False, False, 0, 0
        if i < n and value[i] == "-":
            suffix, i = True, i + 1
        else:
            if i >= n or not "0" <= value[i] <= "9":
                return NOT_SATISFIABLE
            start, i = _digits(value, i)
            if start is None:
                return NOT_SATISFIABLE
            i = _spaces(value, i)
            if i >= n or value[i] != "-":
                return NOT_SATISFIABLE
            i = _spaces(value, i + 1)
            if i >= n or value[i] == ",":
                open_ended, end = True, length
        if not open_ended:
            if i >= n or not "0" <= value[i] <= "9":
                return NOT_SATISFIABLE
            end, i = _digits(value, i)
            if end is None:
                return NOT_SATISFIABLE
            i = _spaces(value, i)
            if i < n and value[i] != ",":
                return NOT_SATISFIABLE
            if suffix:
                start, end = (length - end if end < length else 0), length - 1
            end = length if end >= length else end + 1
        if start < end:
            ranges.append((start, end))
            total += end - start
            if total > MAX_OFFSET:
                return NOT_SATISFIABLE
        elif start == 0:
            return None
        if i >= n or value[i] != ",":
            break
        i += 1
    if not ranges:
        return NOT_SATISFIABLE
    if total > length:
        return None
    return ranges
