"""Freed host memory kept for the next step: glibc's malloc tuned once per process.

A training step frees what it allocated (the values saved for the gradient, the gradients) and the next
step allocates the same again. glibc's malloc serves a block above its mmap threshold (128 KiB, rising to
the largest block freed so far, at most 32 MiB) with fresh pages, and gives the top of its heap back to the
system once more than its trim threshold is free: each step faults every page in again, and the kernel
zeroes each one. On the large LSTM step that was about 40 000 page faults, a fifth of the step's time.

Like the caching allocators of TensorFlow (BFC) and PyTorch, dfc keeps freed memory for reuse: the first
Session of a process sets glibc's M_MMAP_THRESHOLD to 256 MiB and M_TRIM_THRESHOLD to 1 GiB (mallopt), so
blocks up to 256 MiB come from the heap and up to 1 GiB of free heap stays mapped. The cost: the process's
resident memory stays near its peak instead of shrinking between steps.

Nothing is done on another C library (musl, macOS, Windows), with DFC_MALLOC_TUNING=0, or when the process
already tunes malloc itself (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or a glibc.malloc tunable).
"""
import ctypes
import os
import threading

from dfc import config

MMAP_THRESHOLD = 256 << 20
TRIM_THRESHOLD = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3        # glibc's <malloc.h>
# the same settings for a child process (GLIBC_TUNABLES; a benchmark's competitor runs in one)
TUNABLES = f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"
KEPT = "glibc malloc keeps freed memory (mmap threshold 256 MiB, trim threshold 1 GiB)"

_lock = threading.Lock()
_state = None


def _own_settings(environ):
    return (any(k in environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"))
            or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def keep_freed_memory(environ=None):
    """Tune glibc's malloc as above, once per process; a line saying what was done (for a benchmark's
    conditions)."""
    global _state
    environ = os.environ if environ is None else environ
    with _lock:
        if _state is not None:
            return _state
        if not config.env("DFC_MALLOC_TUNING", environ):
            _state = "the C library's malloc as it is (DFC_MALLOC_TUNING=0)"
        elif _own_settings(environ):
            _state = "glibc malloc as the environment tunes it"
        else:
            try:
                libc = ctypes.CDLL(None)
                libc.gnu_get_libc_version          # glibc only: another libc's mallopt differs or is absent
                ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                     TRIM_THRESHOLD)
            except (OSError, AttributeError):
                ok = None
            _state = (KEPT if ok
                      else "the C library's malloc as it is (not glibc)" if ok is None
                      else "glibc malloc as it is (mallopt refused)")
        return _state
