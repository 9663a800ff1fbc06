"""FILE_SIZES and FILE_SET as the lab reads them: the seed to write the
files, bench's settings check (bench/check_settings.py) to refuse a bad
value before anything starts. Every message starts NAME='value': so the
settings check's one line per variable names it."""
import re
from dataclasses import dataclass

UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
SIZE = re.compile(r"^(\d+)(B|KB|MB|GB)$", re.IGNORECASE)
SET_SPEC = re.compile(r"^(\d+)x(\d+)(B|KB|MB|GB)(?:-(\d+)(B|KB|MB|GB))?$", re.IGNORECASE)
MAX_SET_COUNT = 1_000_000
SIZES_EXPECTED = "expected sizes like 1KB 100KB 1MB, each once (B, KB, MB or GB; KB = 1024 bytes)"
SET_EXPECTED = "expected COUNTxMIN-MAX such as 10000x1KB-30KB, COUNTxSIZE such as 100x1MB, or off"


class SpecError(ValueError):
    """A FILE_SIZES or FILE_SET value that cannot be read."""


@dataclass(frozen=True)
class Spec:
    """A FILE_SET: COUNT files of sizes drawn from [min_size, max_size]."""
    text: str  # normalised: 10000x1KB-30KB
    count: int
    min_size: int
    max_size: int


def parse_sizes(text: str, name: str = "FILE_SIZES") -> list[tuple[str, int]]:
    """'1KB 100KB 1MB' -> [('1KB', 1024), ...]; KB = 1024 bytes."""
    sizes, labels = [], set()
    for word in text.replace(",", " ").split():
        m = SIZE.match(word)
        if not m:
            raise SpecError(f"{name}={text!r}: cannot read {word!r}; {SIZES_EXPECTED}")
        label = f"{int(m.group(1))}{m.group(2).upper()}"
        if label in labels:
            raise SpecError(f"{name}={text!r}: {label} twice; {SIZES_EXPECTED}")
        labels.add(label)
        sizes.append((label, int(m.group(1)) * UNITS[m.group(2).upper()]))
    if not sizes:
        raise SpecError(f"{name}={text!r}: no size; {SIZES_EXPECTED}")
    return sizes


def parse_set(text: str, name: str = "FILE_SET") -> Spec | None:
    """'10000x1KB-30KB' or '100x1MB' -> Spec; '', 'off' -> None."""
    value = text.strip()
    if value.lower() in ("", "off"):
        return None
    m = SET_SPEC.match(value)
    if not m:
        raise SpecError(f"{name}={text!r}: {SET_EXPECTED}")
    count, low, low_unit, high, high_unit = m.groups()
    count, low_unit = int(count), low_unit.upper()
    high, high_unit = (high, high_unit.upper()) if high else (low, low_unit)
    min_size, max_size = int(low) * UNITS[low_unit], int(high) * UNITS[high_unit]
    if not 1 <= count <= MAX_SET_COUNT:
        raise SpecError(f"{name}={text!r}: the count must be 1 to {MAX_SET_COUNT:,}; {SET_EXPECTED}")
    if min_size < 1:
        raise SpecError(f"{name}={text!r}: a file is at least 1B; {SET_EXPECTED}")
    if min_size > max_size:
        raise SpecError(f"{name}={text!r}: the smallest size comes first; {SET_EXPECTED}")
    sizes = f"{int(low)}{low_unit}" + (f"-{int(high)}{high_unit}" if m.group(4) else "")
    return Spec(f"{count}x{sizes}", count, min_size, max_size)
