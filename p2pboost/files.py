"""Files written whole or not at all.

A party that is killed while it saves (SIGKILL, power loss, a full disk) must leave either the
previous file or the new one, never half of one: a truncated model or checkpoint would be read
back as a different model, or refused only after hours of training were lost. POSIX gives that
with a rename: the bytes go to a temporary file in the same directory, are flushed to the
disk (``fsync``), and the file is renamed over the old one (atomic on one file system); the
directory is then flushed so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (see the module docstring)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_dir(target.parent)


def _sync_dir(directory: Path) -> None:
    """Flush a directory's entries (where the platform lets one open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open a directory; its rename is already durable enough
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
