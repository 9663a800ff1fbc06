"""GridFS documents that break GridFS's rules, written next to the lab's
files so that the conformance suite (loadgen/bench/checks/conformance.py,
its BAD_DOCUMENTS) can ask every GridFS path for them: each path must answer
a lying files document with a 500 before the head, and a lie only a later
chunk shows with a 500 or a connection cut after the head; the process
alive, the next good file served (issue 39).

Each is a 10-byte file of 4-byte chunks ("aaaa", "bbbb", "cc") but for its
one lie. Written under its name, replacing any earlier copy; the names
start with "gridfs-lab-bad-", outside the file set's set-* and the sizes'
names, so that nothing else the seed does lists or removes them."""
from datetime import datetime, timezone

from bson import ObjectId
from pymongo.database import Database

LENGTH, CHUNK_SIZE = 10, 4
CHUNKS = {0: b"aaaa", 1: b"bbbb", 2: b"cc"}
UPLOADED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
# name -> (changes to the files document, changes to its chunks by n: a
# value of None drops the chunk, a (key, value) pair stores that chunk
# under another n or with other data)
DOCUMENTS = {
    # int64's largest: a length no allocation or header may take on trust.
    "gridfs-lab-bad-lying-length.bin": ({"length": 2**63 - 1, "chunkSize": 261120}, {}),
    "gridfs-lab-bad-zero-chunk-size.bin": ({"chunkSize": 0}, {}),
    "gridfs-lab-bad-wrong-size-chunk.bin": ({}, {1: ("data", b"bbbbbb")}),
    "gridfs-lab-bad-missing-chunk.bin": ({}, {1: None}),
    "gridfs-lab-bad-string-n.bin": ({}, {1: ("n", "1")}),
    "gridfs-lab-bad-non-binary-data.bin": ({}, {1: ("data", "bbbb")}),
}


def store(database: Database, bucket: str = "fs") -> str:
    """Writes every bad document into `bucket` of `database`, each in place
    of any earlier one of its name; what was done, for the seed's log."""
    files, chunks = database[f"{bucket}.files"], database[f"{bucket}.chunks"]
    for name, (file_changes, chunk_changes) in DOCUMENTS.items():
        for old in files.find({"filename": name}, {"_id": 1}):
            chunks.delete_many({"files_id": old["_id"]})
            files.delete_one({"_id": old["_id"]})
        file_id = ObjectId()
        files.insert_one({"_id": file_id, "filename": name, "length": LENGTH, "chunkSize": CHUNK_SIZE,
                          "uploadDate": UPLOADED, "metadata": {"contentType": "application/octet-stream"},
                          **file_changes})
        rows = []
        for n, data in CHUNKS.items():
            row = {"files_id": file_id, "n": n, "data": data}
            change = chunk_changes.get(n, ())
            if change is None:
                continue
            if change:
                key, value = change
                row[key] = value
            rows.append(row)
        chunks.insert_many(rows)
    return f"{len(DOCUMENTS)} documents that break GridFS's rules written (gridfs-lab-bad-*)"
