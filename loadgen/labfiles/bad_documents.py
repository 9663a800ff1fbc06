"""The GridFS documents that break GridFS's rules: the seed writes them next
to the lab's files (loadgen/seed/bad_documents.py) and bench's conformance
suite asks every GridFS path for them (bench/checks/conformance.py), one
list for both. Each path must answer a lie in the files document with a
500 before the head (its values cannot be trusted for a Content-Length),
and a lie only a later chunk shows with a 500, or the head and the bytes
before that chunk, then the connection cut short of Content-Length; the
process alive, the next good file served (issue 39).

Each is a 10-byte file of 4-byte chunks ("aaaa", "bbbb", "cc") but for its
one lie. The names start with PREFIX, outside the file set's set-* and the
sizes' names, so that nothing else the seed does lists or removes them.
Pure: plain values (bytes where GridFS stores binary); the seed makes the
documents."""
from dataclasses import dataclass

PREFIX = "gridfs-lab-bad-"
LENGTH, CHUNK_SIZE = 10, 4
CHUNKS = {0: b"aaaa", 1: b"bbbb", 2: b"cc"}
CONTENT = b"".join(CHUNKS.values())  # the file but for its lie
# where a lie shows, which decides the answer a path owes
FILES_DOCUMENT, LATER_CHUNK = "files document", "later chunk"


@dataclass(frozen=True)
class BadDocument:
    file_changes: dict   # to the files document
    chunk_changes: dict  # by n: None drops that chunk; a (key, value) pair stores it with that key's value changed
    lie_in: str          # FILES_DOCUMENT or LATER_CHUNK


DOCUMENTS = {
    # int64's largest: a length no allocation or header may take on trust.
    f"{PREFIX}lying-length.bin": BadDocument({"length": 2**63 - 1, "chunkSize": 261120}, {}, FILES_DOCUMENT),
    f"{PREFIX}zero-chunk-size.bin": BadDocument({"chunkSize": 0}, {}, FILES_DOCUMENT),
    f"{PREFIX}wrong-size-chunk.bin": BadDocument({}, {1: ("data", b"bbbbbb")}, LATER_CHUNK),
    f"{PREFIX}missing-chunk.bin": BadDocument({}, {1: None}, LATER_CHUNK),
    f"{PREFIX}string-n.bin": BadDocument({}, {1: ("n", "1")}, LATER_CHUNK),
    f"{PREFIX}non-binary-data.bin": BadDocument({}, {1: ("data", "bbbb")}, LATER_CHUNK),
}
