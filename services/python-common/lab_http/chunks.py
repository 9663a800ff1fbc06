"""Files stored as numbered chunks of a fixed size (GridFS's layout, mirrored
by the SQL store): the checks on a stored file's values, the plan of chunk
reads, and slicing a byte range out of the chunks read. Stored values are
untrusted: anything that does not add up is CorruptFile (a 500 for that
file only, or its connection cut once the head is out), never a crash, a
truncated body or a wrong one."""
import calendar
from datetime import datetime
from typing import Iterable, Iterator

from .store import CorruptFile, StoredFile

# Bytes of chunks one read (a cursor batch, a query) may bring in: a whole
# file of up to this size is one round trip (1 MB is 4 chunks of 255 KiB +
# 4 KiB), and memory per request stays bounded whatever the file size.
READ_BUFFER_BYTES = 1280 * 1024
# A stored _id longer than this is not put into an ETag header.
MAX_ID_TEXT = 255
ETAG_UNSAFE = frozenset('" ')  # besides controls and non-ASCII
# GridFS's limits, as nginx-gridfs and gridfs-fuse check them: a chunk of 1
# byte to 16 MiB (MongoDB's document size), fewer than 2^31 chunks (n is an
# int32), so that no arithmetic on a stored length or chunk size overflows
# and no header carries a length the chunks cannot hold.
MAX_CHUNK_SIZE = 16 * 1024 * 1024
MAX_CHUNKS = 2**31 - 1


def whole_number(value) -> int | None:
    """An integer as stored: int32, int64 or (from JavaScript drivers, past
    2 GiB) a whole double; None for anything else (bool included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        return None
    return int(value)


def checked_file(label: str, id_text: str, length, chunk_size, uploaded, content_type,
                 location) -> StoredFile:
    """The StoredFile of a stored file's values, or CorruptFile naming the
    first bad one: length a whole number >= 0, chunk size a whole number of
    1 byte to MAX_CHUNK_SIZE, the length held by at most MAX_CHUNKS chunks,
    an upload date, and an id text fit for the ETag (visible ASCII but '"',
    at most 255 characters). The content type stays as stored: the app
    falls back to the name's type when it is not a safe header value."""
    checked_length, checked_chunk_size = whole_number(length), whole_number(chunk_size)
    if checked_length is None or checked_length < 0:
        raise CorruptFile(f"{label}: length {length!r}")
    if checked_chunk_size is None or not 0 < checked_chunk_size <= MAX_CHUNK_SIZE:
        raise CorruptFile(f"{label}: chunk size {chunk_size!r}")
    if -(-checked_length // checked_chunk_size) > MAX_CHUNKS:
        raise CorruptFile(f"{label}: length {checked_length} needs more than {MAX_CHUNKS} chunks "
                          f"of {checked_chunk_size} bytes")
    if not isinstance(uploaded, datetime):
        raise CorruptFile(f"{label}: upload date {uploaded!r}")
    if not (0 < len(id_text) <= MAX_ID_TEXT) or any(
            not "\x21" <= c <= "\x7e" or c in ETAG_UNSAFE for c in id_text):
        raise CorruptFile(f"{label}: id {id_text!r} cannot go into an ETag")
    # A naive date (GridFS's) is UTC; an aware one (PostgreSQL's) converts.
    last_modified = calendar.timegm(uploaded.utctimetuple())
    uploaded_ms = last_modified * 1000 + uploaded.microsecond // 1000
    return StoredFile(length=checked_length, last_modified=last_modified,
                      etag=f'"{id_text}-{checked_length:x}-{uploaded_ms:x}"',
                      content_type=content_type, location=(location, checked_chunk_size))


def chunk_span(chunk_size: int, start: int, end: int) -> tuple[int, int]:
    """The first and last chunk numbers holding bytes [start, end), end > start."""
    return start // chunk_size, (end - 1) // chunk_size


def stored_size(length: int, chunk_size: int, n: int) -> int:
    """The exact size chunk n of the file must have: chunk_size, but the
    last chunk holds the remainder."""
    return min(chunk_size, length - n * chunk_size)


def chunks_per_read(length: int, chunk_size: int, first: int, last: int,
                    buffer_bytes: int = READ_BUFFER_BYTES) -> int:
    """How many chunks one read brings in for chunks first..last: all of
    them when their bytes fit the buffer, else as many whole chunks as fit
    (one at least)."""
    if min(length, (last + 1) * chunk_size) - first * chunk_size <= buffer_bytes:
        return last - first + 1
    return max(1, buffer_bytes // chunk_size)


def read_plan(length: int, chunk_size: int, first: int, last: int,
              buffer_bytes: int = READ_BUFFER_BYTES) -> list[tuple[int, int]]:
    """The reads (first, last chunk number) that bring in chunks
    first..last, each at most buffer_bytes (or one chunk)."""
    plan = []
    while first <= last:
        upto = first + chunks_per_read(length, chunk_size, first, last, buffer_bytes) - 1
        plan.append((first, upto))
        first = upto + 1
    return plan


def slice_chunks(rows: Iterable[tuple[int, bytes]], length: int, chunk_size: int, start: int, end: int,
                 label: str) -> Iterator[bytes]:
    """Bytes [start, end) out of rows (n, data) numbered first..last in
    order; a missing or misplaced chunk, or one whose size is not exactly
    its stored_size, raises CorruptFile."""
    first, last = chunk_span(chunk_size, start, end)
    expected = first
    for n, data in rows:
        if n != expected or not isinstance(data, bytes) or len(data) != stored_size(length, chunk_size, n):
            size = len(data) if isinstance(data, bytes) else type(data).__name__
            raise CorruptFile(f"chunk {n!r} of {label} missing or of the wrong size "
                              f"(expected chunk {expected} of {stored_size(length, chunk_size, expected)} "
                              f"bytes, got {size})")
        offset = n * chunk_size
        low = start - offset if n == first else 0
        high = end - offset if n == last else len(data)
        yield data if low == 0 and high == len(data) else bytes(data[low:high])
        expected += 1
        if expected > last:
            return
    raise CorruptFile(f"{label} ends at chunk {expected - 1}, expected {last}")
