"""Slicing a byte range out of a file stored as numbered chunks of a fixed
size (GridFS's layout, mirrored by the SQL store): both stores hand over
their (n, data) rows in order and get the pieces of the answer back."""
from typing import Iterable, Iterator

from .store import CorruptFile


def chunk_span(chunk_size: int, start: int, end: int) -> tuple[int, int]:
    """The first and last chunk numbers holding bytes [start, end), end > start."""
    return start // chunk_size, (end - 1) // chunk_size


def slice_chunks(rows: Iterable[tuple[int, bytes]], chunk_size: int, start: int, end: int,
                 label: str) -> Iterator[bytes]:
    """Bytes [start, end) out of rows (n, data) numbered first..last in
    order; a missing, misplaced or short chunk raises CorruptFile."""
    first, last = chunk_span(chunk_size, start, end)
    expected = first
    for n, data in rows:
        offset = n * chunk_size
        low = start - offset if n == first else 0
        high = end - offset if n == last else chunk_size
        if n != expected or len(data) < high:
            raise CorruptFile(f"chunk {n} of {label} missing or short (expected chunk {expected})")
        yield data if low == 0 and high == len(data) else bytes(data[low:high])
        expected += 1
        if expected > last:
            return
    raise CorruptFile(f"{label} ends at chunk {expected - 1}, expected {last}")
