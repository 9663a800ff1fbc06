"""Flask serving path: GET|HEAD /files/<name> streams the newest GridFS
revision of <name> chunk by chunk. The HTTP semantics (nginx's) are
services/python-common/lab_http, shared with flask-postgres; this file is
the GridFS store.

Hot path per request: one find on <bucket>.files, then one cursor on
<bucket>.chunks limited to the chunks the answer needs.
"""
import os
import re
import time

import pymongo
from bson import ObjectId
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from lab_http import StoredFile, StoreUnavailable, create_app
from lab_http.chunks import checked_file, chunk_span, chunks_per_read, slice_chunks

MONGO_URI = os.environ.get("MONGO_URI", "mongodb://mongo:27017")
GRIDFS_DB = os.environ.get("GRIDFS_DB", "lab")
GRIDFS_BUCKET = os.environ.get("GRIDFS_BUCKET", "fs")

FILE_PROJECTION = {"length": 1, "chunkSize": 1, "uploadDate": 1, "metadata.contentType": 1}
# An _id that is not an ObjectId goes into the ETag as text: visible ASCII
# but '"' and space (checked_file refuses what would be left empty or too long).
NOT_ETAG_SAFE = re.compile(r'[^\x21\x23-\x7e]')


def id_text(file_id) -> str:
    """The same text of an _id as the Node path's: an ObjectId's hex, a
    string's or an integer's safe characters; anything else none."""
    if isinstance(file_id, ObjectId):
        return str(file_id)
    if isinstance(file_id, str) or (isinstance(file_id, int) and not isinstance(file_id, bool)):
        return NOT_ETAG_SAFE.sub("", str(file_id))
    return ""


class GridFSStore:
    kind = "MongoDB"

    def __init__(self, uri: str, db: str, bucket: str):
        # Bounded waits, so that a missing MongoDB turns into a 503 within
        # about two seconds instead of a hung request; the driver reconnects
        # by itself later.
        client = MongoClient(uri, appname="gridfs-lab-flask", serverSelectionTimeoutMS=2000,
                             connectTimeoutMS=2000, socketTimeoutMS=5000)
        self.files = client[db][f"{bucket}.files"]
        self.chunks = client[db][f"{bucket}.chunks"]

    def within(self, deadline: float):
        """pymongo's own deadline (CSOT) for the driver calls in the block:
        a wait for a pooled connection, a server or an answer ends in a
        PyMongoError (StoreUnavailable here) and a connection left midway is
        dropped. A gevent.Timeout thrown into the driver instead could land
        while it held its pool's lock: 500s ("Semaphore released too many
        times") on a frozen database. Calls after the block (a body's later
        chunks) are bounded by socketTimeoutMS alone."""
        return pymongo.timeout(max(deadline - time.monotonic(), 0.001))

    def find(self, name: str) -> StoredFile | None:
        try:
            document = self.files.find_one({"filename": name}, FILE_PROJECTION, sort=[("uploadDate", -1)])
        except PyMongoError as error:
            raise StoreUnavailable(repr(error)) from error
        if document is None:
            return None
        # Stored values are untrusted: checked_file makes a bad one a 500.
        metadata = document.get("metadata")
        return checked_file(f"file {document['_id']!r}", id_text(document["_id"]), document.get("length"),
                            document.get("chunkSize"), document.get("uploadDate"),
                            metadata.get("contentType") if isinstance(metadata, dict) else None,
                            document["_id"])

    def read(self, stored: StoredFile, start: int, end: int):
        file_id, chunk_size = stored.location
        first, last = chunk_span(chunk_size, start, end)
        # The limit lets the server close the cursor with the batch that
        # holds the last chunk (no getMore round trip to learn it is done).
        cursor = self.chunks.find(
            {"files_id": file_id, "n": {"$gte": first, "$lte": last}},
            projection={"_id": 0, "n": 1, "data": 1}, sort=[("n", 1)], limit=last - first + 1,
            batch_size=chunks_per_read(stored.length, chunk_size, first, last))
        try:
            rows = ((chunk.get("n"), chunk.get("data")) for chunk in cursor)
            yield from slice_chunks(rows, stored.length, chunk_size, start, end, f"file {file_id!r}")
        except PyMongoError as error:
            raise StoreUnavailable(repr(error)) from error
        finally:
            cursor.close()


app = create_app(GridFSStore(MONGO_URI, GRIDFS_DB, GRIDFS_BUCKET), "gridfs-lab-flask")
