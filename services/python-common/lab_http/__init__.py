"""What the Python serving paths (services/flask, services/flask-postgres)
share: nginx's HTTP semantics for GET|HEAD /files/<name> over any chunked
store. A path supplies a FileStore (store.py) and calls create_app (app.py).

Modules: names (strict file names, content types), preconditions (304/412,
If-Range), ranges (the Range header), chunks (GridFS-style chunk slicing),
store (the store interface), extra_work (LAB_TEST_EXTRA_WORK, the A/B's
test-only known change), app (the Flask app)."""
from .app import before_deadline, create_app
from .store import CorruptFile, FileStore, StoreError, StoredFile, StoreUnavailable

__all__ = ["before_deadline", "create_app", "CorruptFile", "FileStore", "StoreError", "StoredFile", "StoreUnavailable"]
