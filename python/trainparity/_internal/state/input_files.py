"""Input files that must be regular files: FIFOs and devices are refused before opening."""

from __future__ import annotations

import os
import stat

_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(path: str | os.PathLike[str]) -> str | None:
    """ "a FIFO", "a character device", ... for an existing special file, else None.

    Input files are memory-mapped or read whole: opening a FIFO without a
    writer blocks forever, and a device or pipe reports a size of 0. Missing
    paths and directories give None, so that opening them raises as usual.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, kind in _SPECIAL_FILES:
        if test(mode):
            return kind
    return None
