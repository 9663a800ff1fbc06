"""The host of a request, as nginx 1.22 accepts it (the Host header and
the authority of an absolute-form target alike), so that the Python paths
refuse with 400 what nginx refuses (RFC 9112 3.2: a server answers an
invalid Host with 400)."""
import re
from functools import lru_cache

# An absolute-form target (RFC 9112 3.2.2, "GET http://host/x"): scheme and
# authority, followed by the path nginx serves whatever the host.
ABSOLUTE_FORM = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


@lru_cache(maxsize=64)  # a path's clients send one Host or a few: checked once each, not per request
def valid_host(value: str) -> bool:
    """nginx's ngx_http_validate_host: no '/', space or control character,
    no empty label ("a..b"), and a name before any port."""
    previous_dot = None
    name_end = len(value)
    state = "name"
    for i, ch in enumerate(value):
        if ch == ".":
            if previous_dot == i - 1:
                return False
            previous_dot = i
        elif ch == ":":
            if state == "name":
                name_end, state = i, "port"
        elif ch == "[":
            if i == 0:
                state = "literal"  # an IPv6 address: its colons are not a port
        elif ch == "]":
            if state == "literal":
                name_end, state = i + 1, "port"
        elif ch == "/" or ch <= " " or ch == "\x7f":
            return False
    if previous_dot is not None and previous_dot == name_end - 1:
        name_end -= 1  # a trailing dot
    return name_end > 0


def split_absolute_form(target: str) -> tuple[str | None, str]:
    """(authority, origin-form target) of an absolute-form target; (None,
    target) for any other."""
    match = ABSOLUTE_FORM.match(target)
    if match is None:
        return None, target
    return match.group(1), target[match.end():] or "/"
