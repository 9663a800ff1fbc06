"""The write phase's files (seed 002's method: N files of one size):
deterministic pseudo-random bytes, different in every file and
incompressible, made without new random data per file. File i is its index
in 8 bytes, then one random base rotated by an offset of its own; it is
read piece by piece, so a writer thread never holds a whole copy."""
import hashlib
import random

ROTATION_STEP = 104_729  # a prime: file i starts i steps further into the base
INDEX_BYTES = 8


def base_bytes(size: int) -> bytes:
    """The same bytes for a size on every run and machine."""
    return random.Random(f"gridfs-lab-writes:{size}").randbytes(size)


def file_name(index: int) -> str:
    return f"write-{index:05d}.bin"


class FileSource:
    """File `index` of the write phase, as a stream: read(n) gives its next
    n bytes (less at the end, b"" past it), as a file object does."""

    def __init__(self, base: bytes, index: int):
        self.base, self.index, self.size = base, index, len(base)
        self.name = file_name(index)
        self._offset = (index * ROTATION_STEP) % self.size if self.size else 0
        self._position = 0

    def _at(self, position: int, n: int) -> bytes:
        """n bytes of the file from `position` (within its size)."""
        head = self.index.to_bytes(INDEX_BYTES, "big")[:self.size]
        out = head[position:position + n] if position < len(head) else b""
        position += len(out)
        while len(out) < n:
            start = (self._offset + position) % self.size
            piece = self.base[start:start + n - len(out)]
            out += piece
            position += len(piece)
        return out

    def read(self, n: int = -1) -> bytes:
        left = self.size - self._position
        n = left if n is None or n < 0 else min(n, left)
        out = self._at(self._position, n) if n > 0 else b""
        self._position += len(out)
        return out

    def pieces(self, n: int):
        """The whole file from its start, n bytes at a time."""
        for position in range(0, self.size, n):
            yield self._at(position, min(n, self.size - position))

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for piece in self.pieces(1 << 20):
            digest.update(piece)
        return digest.hexdigest()
