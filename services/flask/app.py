"""Flask serving path: GET|HEAD /files/<name> streams the newest GridFS
revision of <name> chunk by chunk. The HTTP semantics (nginx's) are
services/python-common/lab_http, shared with flask-postgres; this file is
the GridFS store.

Hot path per request: one find on <bucket>.files, then one cursor on
<bucket>.chunks limited to the chunks the answer needs.
"""
import calendar
import os
import re
from datetime import datetime

from bson import ObjectId
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from lab_http import CorruptFile, StoredFile, StoreUnavailable, create_app
from lab_http.chunks import chunk_span, slice_chunks

MONGO_URI = os.environ.get("MONGO_URI", "mongodb://mongo:27017")
GRIDFS_DB = os.environ.get("GRIDFS_DB", "lab")
GRIDFS_BUCKET = os.environ.get("GRIDFS_BUCKET", "fs")

FILE_PROJECTION = {"length": 1, "chunkSize": 1, "uploadDate": 1, "metadata.contentType": 1}
# Chunks fetched per cursor round trip: memory per request stays at a few
# chunks (~1 MiB) whatever the file size, instead of the driver's 16 MiB batches.
CHUNKS_PER_BATCH = 4
# An _id that is not an ObjectId goes into the ETag: visible ASCII but '"' only.
NOT_ETAG_SAFE = re.compile(r'[^\x21\x23-\x7e]')


def whole_number(value) -> int | None:
    """GridFS lengths are int32, int64 or (from JavaScript drivers, past
    2 GiB) a double."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        return None
    return int(value)


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

    def find(self, name: str) -> StoredFile | None:
        try:
            document = self.files.find_one({"filename": name}, FILE_PROJECTION, sort=[("uploadDate", -1)])
        except PyMongoError as error:
            raise StoreUnavailable(repr(error)) from error
        if document is None:
            return None
        # Stored values are untrusted: wrong types are a corrupt file (503), not a crash.
        file_id, uploaded, metadata = document["_id"], document.get("uploadDate"), document.get("metadata")
        length, chunk_size = whole_number(document.get("length")), whole_number(document.get("chunkSize"))
        if length is None or length < 0 or chunk_size is None or chunk_size <= 0 or not isinstance(uploaded, datetime):
            raise CorruptFile(f"file {file_id!r}: length {document.get('length')!r}, "
                              f"chunkSize {document.get('chunkSize')!r}, uploadDate {uploaded!r}")
        last_modified = calendar.timegm(uploaded.utctimetuple())
        uploaded_ms = last_modified * 1000 + uploaded.microsecond // 1000
        # The same validator as the Node and nginx-gridfs paths.
        id_text = str(file_id) if isinstance(file_id, ObjectId) else NOT_ETAG_SAFE.sub("", str(file_id))
        return StoredFile(length=length, last_modified=last_modified,
                          etag=f'"{id_text}-{length:x}-{uploaded_ms:x}"',
                          content_type=metadata.get("contentType") if isinstance(metadata, dict) else None,
                          location=(file_id, chunk_size))

    def read(self, stored: StoredFile, start: int, end: int):
        file_id, chunk_size = stored.location
        first, last = chunk_span(chunk_size, start, end)
        cursor = self.chunks.find(
            {"files_id": file_id, "n": {"$gte": first, "$lte": last}},
            projection={"_id": 0, "n": 1, "data": 1}, sort=[("n", 1)], batch_size=CHUNKS_PER_BATCH)
        try:
            rows = ((chunk["n"], chunk["data"]) for chunk in cursor)
            yield from slice_chunks(rows, chunk_size, start, end, f"file {file_id}")
        except PyMongoError as error:
            raise StoreUnavailable(repr(error)) from error
        finally:
            cursor.close()


app = create_app(GridFSStore(MONGO_URI, GRIDFS_DB, GRIDFS_BUCKET), "gridfs-lab-flask")
