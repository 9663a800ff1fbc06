"""Writes the GridFS documents that break GridFS's rules
(labfiles/bad_documents.py declares them, for the seed and for bench's
conformance suite alike) next to the lab's files, each under its name in
place of any earlier copy."""
from datetime import datetime, timezone

from bson import ObjectId
from pymongo.database import Database

from labfiles.bad_documents import CHUNK_SIZE, CHUNKS, DOCUMENTS, LENGTH, PREFIX

UPLOADED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def store(database: Database, bucket: str = "fs") -> str:
    """Writes every bad document into `bucket` of `database`, each in place
    of any earlier one of its name; what was done, for the seed's log."""
    files, chunks = database[f"{bucket}.files"], database[f"{bucket}.chunks"]
    for name, bad in DOCUMENTS.items():
        for old in files.find({"filename": name}, {"_id": 1}):
            chunks.delete_many({"files_id": old["_id"]})
            files.delete_one({"_id": old["_id"]})
        file_id = ObjectId()
        files.insert_one({"_id": file_id, "filename": name, "length": LENGTH, "chunkSize": CHUNK_SIZE,
                          "uploadDate": UPLOADED, "metadata": {"contentType": "application/octet-stream"},
                          **bad.file_changes})
        rows = []
        for n, data in CHUNKS.items():
            row = {"files_id": file_id, "n": n, "data": data}
            change = bad.chunk_changes.get(n, ())
            if change is None:
                continue
            if change:
                key, value = change
                row[key] = value
            rows.append(row)
        chunks.insert_many(rows)
    return f"{len(DOCUMENTS)} documents that break GridFS's rules written ({PREFIX}*)"
