"""The digest of a disk image: every name, type and byte under a directory.

Two crash points whose images digest the same restart the same way, so only
one of them is restarted. Paths are sorted and relative, so the digest does
not depend on where the directory is or in which order the OS lists it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["image_digest"]

_CHUNK = 1 << 20


def image_digest(directory: Path) -> str:
    """A hex digest of the tree under `directory` (names, types, symlink targets, file bytes)."""
    digest = hashlib.blake2b(digest_size=16)
    for relative in _entries(directory):
        path = directory / relative
        digest.update(os.fsencode(relative) + b"\0")
        if path.is_symlink():
            digest.update(b"L" + os.fsencode(os.readlink(path)) + b"\0")
        elif path.is_dir():
            digest.update(b"D\0")
        else:
            digest.update(b"F" + str(path.stat().st_size).encode() + b"\0")
            with open(path, "rb") as stream:
                while chunk := stream.read(_CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()


def _entries(directory: Path) -> list[str]:
    found: list[str] = []
    for parent, dirs, files in os.walk(directory):
        base = Path(parent).relative_to(directory)
        for name in (*dirs, *files):
            found.append(str(base / name) if str(base) != "." else name)
    return sorted(found)
