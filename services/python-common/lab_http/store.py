"""The interface between the shared HTTP code and a path's store."""
from dataclasses import dataclass
from typing import Any, ContextManager, Iterator, Protocol


class StoreError(Exception):
    """The store cannot answer: the request gets a 503."""


class StoreUnavailable(StoreError):
    """The database is down, unreachable or too slow."""


class CorruptFile(Exception):
    """A stored file breaks GridFS's rules (its values, or its chunks against
    its length and chunk size): a 500 before the head, or the connection cut
    after it. Not a StoreError: a corrupt file does not heal on retry, so it
    is never a 503 with Retry-After."""


@dataclass(frozen=True)
class StoredFile:
    length: int
    last_modified: int        # seconds since the epoch, as Last-Modified carries it
    etag: str                 # strong and quoted, built by the store from trusted numbers
    content_type: str | None  # as stored (untrusted: app checks it before it becomes a header)
    location: Any             # whatever the store needs to read the bytes back


class FileStore(Protocol):
    kind: str  # the database, named in log lines ("MongoDB", "PostgreSQL")

    def find(self, name: str) -> StoredFile | None:
        """The newest revision of `name`, or None; raises StoreError or
        CorruptFile."""

    def read(self, stored: StoredFile, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) chunk by chunk, reading only the chunks that
        hold them; raises StoreError or CorruptFile (also midway)."""

    def within(self, deadline: float) -> ContextManager:
        """A block whose waits on the store (a connection, a server, an
        answer) end by `deadline` (time.monotonic()'s scale) with a
        StoreError, the connection left midway dropped: the store's own
        driver deadline where it has one."""
