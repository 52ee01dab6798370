"""Freed buffers kept for reuse: the one setting of the C allocator the node depends on.

Every fragment that crosses a TLS WebSocket is copied a few times below the node: on the way
out the client's mask, the serialised frame and the TLS layer's output buffer, on the way in
the read buffer, the frame sliced out of it and the unmasked payload. Each copy is a fresh
buffer of about a fragment, freed before the next fragment comes. glibc's ``malloc`` serves
such buffers from the top of its heap and gives the top back to the kernel as soon as more
than its *trim threshold* lies free there. That threshold is twice the *mmap threshold*, which
starts at 128 KiB and rises to the size of the largest mmapped block freed so far, up to
32 MiB (mallopt(3), "dynamic mmap threshold"). With fragments of about 1 MiB the top of the
heap swings by a few MiB per fragment, more than the threshold, so it is handed back after
nearly every fragment and the buffers of the next one are fresh pages: each costs a page fault
per 4 KiB when first written. Measured on this project's machines (two parties in separate
processes over mutual TLS, 1 MiB messages): about 730 minor faults per MiB at the sender and
250 at the receiver, which made the sender spend 2.8 ms of CPU per MiB instead of 1.0 and
halved the throughput; with the freed buffers kept, each side faults one to three times per
MiB.

:func:`retain_freed_buffers` allocates one block above the threshold and frees it. It was
mmapped, so freeing it raises the mmap threshold to its size and the trim threshold to twice
that: the state glibc reaches by itself once any message of that size has been freed, reached
before the first fragment instead of never (a run of 1 MiB fragments never frees a larger
block). Its cost is two system calls: ``bytes(n)`` asks for zeroed memory, and glibc does not
touch the pages of a fresh mapping to zero them.

Why not ``mallopt(M_TRIM_THRESHOLD, ...)``: setting any threshold turns the dynamic adjustment
off for the rest of the process, so blocks above a fixed threshold (a large message being
reassembled) would be mapped and faulted afresh every time; it would also need ``ctypes``.
Raising the dynamic threshold leaves glibc adapting upwards as before. The effect is
process-wide and small: blocks up to the block's size come from the heap instead of their own
mappings, and up to twice that stays mapped after it is freed. Other C libraries allocate
differently; the function does nothing there.
"""

from __future__ import annotations

import os

__all__ = ["MAX_RETAINED", "retain_freed_buffers"]

#: glibc raises its thresholds only for freed blocks up to 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX
#: on 64-bit systems, chunk overhead included); stay well below it.
MAX_RETAINED = 16 * 1024 * 1024

#: The largest block this process has freed for the purpose (0: none yet).
_retained = 0


def _glibc() -> bool:
    """Whether this process runs on glibc, whose heap trimming this module is about."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (AttributeError, ValueError, OSError):  # not POSIX, or not a GNU C library
        return False


def retain_freed_buffers(size: int) -> int:
    """Make glibc keep up to about ``2 * size`` bytes of freed memory for reuse (see the
    module's docstring); ``size`` is capped at :data:`MAX_RETAINED`.

    Returns the block size freed, or 0 when nothing was done: not glibc, or a block at
    least as large was freed before (the thresholds only rise, so once is enough).
    """
    global _retained
    size = min(size, MAX_RETAINED)
    if size <= _retained or not _glibc():
        return 0
    block = bytes(size)  # zeroed memory from a fresh mapping: its pages are never touched
    del block
    _retained = size
    return size
