"""The checkpoint file format every training protocol writes: whole or not at all, checked.

A file is a magic line, the SHA-256 of its body and the body (msgpack, the wire codec, with
limits fit for a large party's files). A truncated, edited or foreign file, or one of another
kind, is refused with :class:`~p2pboost.exceptions.CheckpointError` naming the cause; a file is
replaced atomically (:func:`p2pboost.files.atomic_write`), so a crash mid-write leaves the
previous checkpoint.

The format is the same for every protocol (vertical and horizontal write it, each its own
``kind``), and it needs only the codec and :mod:`p2pboost.files`: it sits just above the codec,
beside the node (``lint-imports`` keeps both apart), where every protocol can use it and it
can use nothing of theirs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from p2pboost.codec import Limits, decode, encode
from p2pboost.exceptions import CheckpointError, CodecError
from p2pboost.files import atomic_write

__all__ = ["read_checkpoint", "write_checkpoint"]

_MAGIC = b"p2pboost checkpoint v1\n"
#: A checkpoint holds margins of every training row: allow what a large party writes.
_FILE_LIMITS = Limits(
    max_message_bytes=1 << 40,
    max_ext_bytes=1 << 40,
    max_array_elements=1 << 36,
    max_elements=1 << 28,
    max_container_len=1 << 28,
    max_str_bytes=1 << 28,
)


def write_checkpoint(path: Path, kind: str, body: dict[str, Any]) -> None:
    """Write ``body`` (codec values) as a checkpoint of ``kind`` at ``path``, atomically."""
    payload = encode({**body, "format": kind})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, _MAGIC + hashlib.sha256(payload).digest() + payload)


def read_checkpoint(path: Path, kind: str) -> dict[str, Any]:
    """The body of the checkpoint of ``kind`` at ``path`` (CheckpointError naming why not)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from None
    head = len(_MAGIC)
    if not raw.startswith(_MAGIC) or len(raw) < head + 32:
        raise CheckpointError(f"{str(path)!r} is not a p2pboost checkpoint")
    digest, payload = raw[head : head + 32], raw[head + 32 :]
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupted (its digest does not match)")
    try:
        body = decode(payload, limits=_FILE_LIMITS)
    except CodecError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be decoded: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != kind:
        raise CheckpointError(f"{str(path)!r} is not a {kind} file")
    return body
