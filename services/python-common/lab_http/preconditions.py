"""Conditional requests as nginx's not_modified filter and range filter
evaluate them.

Werkzeug's parsers are used for the parts that agree with nginx: entity-tag
lists (parse_etags: "*", W/ prefixes, strong and weak comparison) and HTTP
dates (parse_date). Its combined evaluation (is_resource_modified, what
Response.make_conditional uses) answers otherwise, so the order and the
comparisons are nginx's, by hand:
  - If-Modified-Since must equal Last-Modified exactly (nginx's default
    "if_modified_since exact"): a later date is a 200 for nginx, a 304 for
    Werkzeug;
  - If-None-Match and If-Modified-Since must both hold for a 304: with a
    matching ETag and an older date nginx answers 200, Werkzeug 304;
  - If-Range: a value ending in '"' is an entity tag compared byte for byte
    (W/"..." never matches: test_if_range), anything else a date equal to
    Last-Modified; Werkzeug drops the W/ and takes any date not older.
tests/test_flask_postgres.py has a case against nginx for each.
"""
from werkzeug.datastructures import Headers
from werkzeug.http import parse_date, parse_etags, unquote_etag


def http_time(value: str) -> int | None:
    parsed = parse_date(value)
    return None if parsed is None else int(parsed.timestamp())


def precondition_status(headers: Headers, etag: str, last_modified: int) -> int | None:
    """412 or 304 where nginx answers them, else None (serve the file)."""
    opaque_tag = unquote_etag(etag)[0]
    if_unmodified_since = headers.get("If-Unmodified-Since")
    if if_unmodified_since is not None:
        unmodified_since = http_time(if_unmodified_since)
        if unmodified_since is None or unmodified_since < last_modified:
            return 412
    if_match = headers.get("If-Match")
    if if_match is not None and not parse_etags(if_match).contains(opaque_tag):
        return 412
    if_modified_since, if_none_match = headers.get("If-Modified-Since"), headers.get("If-None-Match")
    if if_modified_since is not None or if_none_match is not None:
        if ((if_modified_since is None or http_time(if_modified_since) == last_modified)
                and (if_none_match is None or parse_etags(if_none_match).contains_weak(opaque_tag))):
            return 304
    return None


def if_range_allows(if_range: str | None, etag: str, last_modified: int) -> bool:
    """Whether a Range header applies given If-Range (absent: it does)."""
    if if_range is None:
        return True
    if len(if_range) >= 2 and if_range.endswith('"'):
        return if_range == etag
    return http_time(if_range) == last_modified
