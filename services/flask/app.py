"""Flask serving path: GET|HEAD /files/<name> streams the newest GridFS
revision of <name> chunk by chunk, with the HTTP semantics of nginx's static
module (validators, Range, 304/412/416), so that the two compare like for like.

Hot path per request: one find on <bucket>.files, then one cursor on
<bucket>.chunks limited to the chunks the answer needs.
"""
import calendar
import os
import re
import sys
import time
from itertools import chain
from urllib.parse import quote, unquote_to_bytes

from bson import ObjectId
from flask import Flask, Response, request
from pymongo import MongoClient
from pymongo.errors import PyMongoError
from werkzeug.http import http_date, parse_date

MONGO_URI = os.environ.get("MONGO_URI", "mongodb://mongo:27017")
GRIDFS_DB = os.environ.get("GRIDFS_DB", "lab")
GRIDFS_BUCKET = os.environ.get("GRIDFS_BUCKET", "fs")

# Bounded waits, so that a missing MongoDB turns into a 503 within about two
# seconds instead of a hung request; the driver reconnects by itself later.
client = MongoClient(MONGO_URI, appname="gridfs-lab-flask",
                     serverSelectionTimeoutMS=2000, connectTimeoutMS=2000,
                     socketTimeoutMS=5000)
files_collection = client[GRIDFS_DB][f"{GRIDFS_BUCKET}.files"]
chunks_collection = client[GRIDFS_DB][f"{GRIDFS_BUCKET}.chunks"]

FILE_PROJECTION = {"length": 1, "chunkSize": 1, "uploadDate": 1, "metadata.contentType": 1}
# Chunks fetched per cursor round trip: memory per request stays at a few
# chunks (~1 MiB) whatever the file size, instead of the driver's 16 MiB batches.
CHUNKS_PER_BATCH = 4
MAX_NAME_BYTES = 255
MAX_OFFSET = 2**63 - 1  # nginx's off_t limit for Range values

# A subset of nginx's mime.types, identical in the Node path, for files
# stored without metadata.contentType.
CONTENT_TYPES = {
    "html": "text/html", "htm": "text/html", "css": "text/css", "xml": "text/xml",
    "txt": "text/plain", "js": "application/javascript", "json": "application/json",
    "gif": "image/gif", "jpeg": "image/jpeg", "jpg": "image/jpeg", "png": "image/png",
    "svg": "image/svg+xml", "webp": "image/webp", "ico": "image/x-icon",
    "woff2": "font/woff2", "pdf": "application/pdf", "zip": "application/zip",
    "wasm": "application/wasm", "mp3": "audio/mpeg", "mp4": "video/mp4",
    "webm": "video/webm", "bin": "application/octet-stream",
}

BAD_PERCENT = re.compile(rb"%(?![0-9A-Fa-f]{2})")
NOT_SATISFIABLE = "not satisfiable"

app = Flask(__name__)
app.url_map.merge_slashes = False  # "/files//x" is a name to reject, not a redirect


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gridfs-lab-flask: {message}", file=sys.stderr, flush=True)


def text_response(status: int, text: str, headers: dict | None = None) -> Response:
    return Response(text + "\n", status, headers, content_type="text/plain")


def name_from_target(target: str) -> tuple[str | None, int]:
    """The GridFS filename in a raw request target, or (None, status).

    Decoded once, strictly: a bad %-escape, invalid UTF-8, a control
    character, a backslash, an empty, "." or ".." segment, or more than 255
    bytes is a 400; nothing else is interpreted (GridFS has no directories)."""
    path = target.split("?", 1)[0].split("#", 1)[0]
    if not path.startswith("/files/"):
        return None, 404
    raw = path[len("/files/"):].encode("latin-1", "replace")
    if BAD_PERCENT.search(raw):
        return None, 400
    name_bytes = unquote_to_bytes(raw)
    if not name_bytes:
        return None, 404
    if len(name_bytes) > MAX_NAME_BYTES:
        return None, 400
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None, 400
    if any(c < "\x20" or c == "\x7f" or c == "\\" for c in name):
        return None, 400
    if any(segment in ("", ".", "..") for segment in name.split("/")):
        return None, 400
    return name, 200


def guess_content_type(name: str) -> str:
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return CONTENT_TYPES.get(extension, "application/octet-stream")


def http_time(value: str) -> int | None:
    parsed = parse_date(value)
    return None if parsed is None else int(parsed.timestamp())


def etag_matches(header: str, etag: str, weak: bool) -> bool:
    """nginx's If-Match (strong) / If-None-Match (weak) comparison."""
    if header.strip() == "*":
        return True
    for candidate in header.split(","):
        candidate = candidate.strip(" \t")
        if weak and candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == etag:
            return True
    return False


def parse_digits(value: str, i: int) -> tuple[int | None, int]:
    j = i
    while j < len(value) and "0" <= value[j] <= "9":
        j += 1
    digits = value[i:j].lstrip("0")
    if len(digits) > 19 or int(digits or "0") > MAX_OFFSET:
        return None, j
    return int(digits or "0"), j


def skip_spaces(value: str, i: int) -> int:
    while i < len(value) and value[i] == " ":
        i += 1
    return i


def parse_range(value: str, length: int):
    """A port of ngx_http_range_parse for a header starting with "bytes=".

    Returns a list of (start, end_exclusive), NOT_SATISFIABLE (416), or None
    when the header is to be ignored (200), exactly where nginx does."""
    ranges, total, i, n = [], 0, 6, len(value)
    while True:
        i = skip_spaces(value, i)
        suffix, open_ended, start, end = False, False, 0, 0
        if i < n and value[i] == "-":
            suffix, i = True, i + 1
        else:
            if i >= n or not "0" <= value[i] <= "9":
                return NOT_SATISFIABLE
            start, i = parse_digits(value, i)
            if start is None:
                return NOT_SATISFIABLE
            i = skip_spaces(value, i)
            if i >= n or value[i] != "-":
                return NOT_SATISFIABLE
            i = skip_spaces(value, i + 1)
            if i >= n or value[i] == ",":
                open_ended, end = True, length
        if not open_ended:
            if i >= n or not "0" <= value[i] <= "9":
                return NOT_SATISFIABLE
            end, i = parse_digits(value, i)
            if end is None:
                return NOT_SATISFIABLE
            i = skip_spaces(value, i)
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


class CorruptFile(Exception):
    pass


def iter_chunks(file_id, chunk_size: int, start: int, end: int):
    """Bytes [start, end) of a file, one chunk at a time, reading only the
    chunks that hold them."""
    first, last = start // chunk_size, (end - 1) // chunk_size
    cursor = chunks_collection.find(
        {"files_id": file_id, "n": {"$gte": first, "$lte": last}},
        projection={"_id": 0, "n": 1, "data": 1}, sort=[("n", 1)], batch_size=CHUNKS_PER_BATCH)
    try:
        expected = first
        for chunk in cursor:
            n, data = chunk["n"], chunk["data"]
            offset = n * chunk_size
            low = start - offset if n == first else 0
            high = end - offset if n == last else chunk_size
            if n != expected or len(data) < high:
                raise CorruptFile(f"chunk {n} of {file_id} missing or short (expected chunk {expected})")
            yield data if low == 0 and high == len(data) else data[low:high]
            expected += 1
        if expected != last + 1:
            raise CorruptFile(f"file {file_id} ends at chunk {expected - 1}, expected {last}")
    finally:
        cursor.close()


@app.before_request
def require_host():
    # HTTP/1.1 requires Host (RFC 9112 3.2): refuse as nginx does, since
    # gunicorn lets such requests through.
    if request.environ.get("SERVER_PROTOCOL") == "HTTP/1.1" and "HTTP_HOST" not in request.environ:
        return text_response(400, "missing Host header")
    return None


@app.get("/health")
def health():
    return text_response(200, "ok")


@app.route("/files/<path:_name>", methods=["GET", "HEAD"], provide_automatic_options=False)
def serve_file(_name):
    environ = request.environ
    # The raw target, so that decoding is ours (strict, once) and not the
    # server's; the fallback re-encodes what another WSGI server decoded.
    target = environ.get("RAW_URI") or quote(environ.get("PATH_INFO", "").encode("latin-1"))
    name, status = name_from_target(target)
    if name is None:
        return text_response(status, "bad file name" if status == 400 else "not found")

    try:
        document = files_collection.find_one({"filename": name}, FILE_PROJECTION, sort=[("uploadDate", -1)])
    except PyMongoError as error:
        log(f"MongoDB unavailable looking up {name!r}: {error!r}")
        return text_response(503, "storage unavailable", {"Retry-After": "1"})
    if document is None:
        return text_response(404, "not found")

    file_id, length, chunk_size = document["_id"], int(document["length"]), int(document["chunkSize"])
    uploaded = document["uploadDate"]
    last_modified = calendar.timegm(uploaded.utctimetuple())
    uploaded_ms = last_modified * 1000 + uploaded.microsecond // 1000
    id_text = str(file_id) if isinstance(file_id, ObjectId) else str(file_id).replace('"', "")
    etag = f'"{id_text}-{length:x}-{uploaded_ms:x}"'
    content_type = (document.get("metadata") or {}).get("contentType")
    if not isinstance(content_type, str) or not content_type:
        content_type = guess_content_type(name)
    validators = {"Last-Modified": http_date(last_modified), "ETag": etag}

    # Preconditions as nginx's not_modified filter evaluates them: If-Match /
    # If-Unmodified-Since -> 412; If-Modified-Since (exact date, nginx's
    # default "if_modified_since exact") and If-None-Match must all hold -> 304.
    headers = request.headers
    if_unmodified_since = headers.get("If-Unmodified-Since")
    if if_unmodified_since is not None:
        unmodified_since = http_time(if_unmodified_since)
        if unmodified_since is None or unmodified_since < last_modified:
            return text_response(412, "precondition failed")
    if_match = headers.get("If-Match")
    if if_match is not None and not etag_matches(if_match, etag, weak=False):
        return text_response(412, "precondition failed")
    if_modified_since, if_none_match = headers.get("If-Modified-Since"), headers.get("If-None-Match")
    if if_modified_since is not None or if_none_match is not None:
        if ((if_modified_since is None or http_time(if_modified_since) == last_modified)
                and (if_none_match is None or etag_matches(if_none_match, etag, weak=True))):
            return Response(None, 304, validators)

    status, start, end = 200, 0, length
    response_headers = {"Content-Type": content_type, **validators}
    range_header = headers.get("Range")
    if range_header is not None and len(range_header) >= 7 and range_header[:6].lower() == "bytes=":
        if_range = headers.get("If-Range")
        if if_range is None:
            range_applies = True
        elif len(if_range) >= 2 and if_range.endswith('"'):
            range_applies = if_range == etag
        else:
            range_applies = http_time(if_range) == last_modified
        ranges = parse_range(range_header, length) if range_applies else None
        if ranges == NOT_SATISFIABLE:
            return text_response(416, "range not satisfiable", {"Content-Range": f"bytes */{length}"})
        # Several ranges: nginx answers multipart/byteranges; we answer the
        # whole file with 200, which RFC 9110 allows (a server may ignore
        # Range), and no download tool needs multipart.
        if ranges is not None and len(ranges) == 1:
            status, (start, end) = 206, ranges[0]
            response_headers["Content-Range"] = f"bytes {start}-{end - 1}/{length}"
    if status == 200:
        response_headers["Accept-Ranges"] = "bytes"
    response_headers["Content-Length"] = str(end - start)

    if request.method == "HEAD" or start == end:
        return Response(None, status, response_headers)
    # The first chunk is read before the status line goes out, so that a
    # MongoDB failure there is still a clean 503; later failures can only
    # cut the connection short (Content-Length tells the client).
    body = iter_chunks(file_id, chunk_size, start, end)
    try:
        first_piece = next(body)
    except (PyMongoError, CorruptFile) as error:
        body.close()
        log(f"cannot read chunks of {name!r}: {error!r}")
        return text_response(503, "storage unavailable", {"Retry-After": "1"})
    response = Response(chain((first_piece,), body), status, response_headers, direct_passthrough=True)
    response.call_on_close(body.close)
    return response


@app.errorhandler(405)
def method_not_allowed(error):
    return text_response(405, "method not allowed", {"Allow": "GET, HEAD"})


@app.errorhandler(404)
def not_found(error):
    return text_response(404, "not found")
