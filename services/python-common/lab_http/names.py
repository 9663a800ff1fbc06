"""File names in request targets and the Content-Type of a stored file."""
import re
from functools import lru_cache
from urllib.parse import unquote_to_bytes

from .hosts import split_absolute_form

MAX_NAME_BYTES = 255
BAD_PERCENT = re.compile(rb"%(?![0-9A-Fa-f]{2})")

# A subset of nginx's mime.types, identical in the Node path, for files
# stored without a content type.
CONTENT_TYPES = {
    "html": "text/html", "htm": "text/html", "css": "text/css", "xml": "text/xml",
    "txt": "text/plain", "js": "application/javascript", "json": "application/json",
    "gif": "image/gif", "jpeg": "image/jpeg", "jpg": "image/jpeg", "png": "image/png",
    "svg": "image/svg+xml", "webp": "image/webp", "ico": "image/x-icon",
    "woff2": "font/woff2", "pdf": "application/pdf", "zip": "application/zip",
    "wasm": "application/wasm", "mp3": "audio/mpeg", "mp4": "video/mp4",
    "webm": "video/webm", "bin": "application/octet-stream",
}
# A stored content type becomes a header: only type/subtype with optional
# token=value parameters is trusted (no control character, nothing above
# ASCII: the same rule as the Node path's).
TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"
CONTENT_TYPE_VALUE = re.compile(rf'{TOKEN}/{TOKEN}(?:[ \t]*;[ \t]*{TOKEN}=(?:{TOKEN}|"[ !#-\[\]-~]*"))*')


# Clients ask the same few names over and over, refusals included (issue
# 39): each target decoded once while it is asked.
@lru_cache(maxsize=256)
def name_from_target(target: str) -> tuple[str | None, int]:
    """The stored file name in a raw request target, or (None, status).

    Decoded once, strictly: a bad %-escape, invalid UTF-8, a control
    character, a backslash, an empty, "." or ".." segment, or more than 255
    bytes is a 400; nothing else is interpreted (the stores have no
    directories). An absolute-form target names the same file as its path."""
    path = split_absolute_form(target)[1].split("?", 1)[0].split("#", 1)[0]
    if not path.startswith("/files/"):
        return None, 404
    raw = path[len("/files/"):].encode("latin-1", "replace")
    if BAD_PERCENT.search(raw):
        return None, 400
    name_bytes = unquote_to_bytes(raw)
    if not name_bytes:
        return None, 404
    if len(name_bytes) > MAX_NAME_BYTES:
        return None, 400
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None, 400
    if any(c < "\x20" or c == "\x7f" or c == "\\" for c in name):
        return None, 400
    if any(segment in ("", ".", "..") for segment in name.split("/")):
        return None, 400
    return name, 200


def content_type_for(name: str, stored: str | None) -> str:
    """The stored type when it is a well-formed header value, else the type
    nginx would give the name's extension."""
    if isinstance(stored, str) and len(stored) <= 255 and CONTENT_TYPE_VALUE.fullmatch(stored):
        return stored
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return CONTENT_TYPES.get(extension, "application/octet-stream")
