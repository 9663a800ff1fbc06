"""A module run afresh from its file, without editing sys.path: a tool's
script (tools/lab/overload.py) or a serving path's module (pool.py of
services/flask-postgres, whose app.py shares its name with flask's)."""
import importlib.util
from pathlib import Path


def module_from_file(path: Path, name: str):
    """The module of `path`, executed now under `name` (a new module object each call)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
