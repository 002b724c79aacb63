"""Kernels of the summary ops and the TensorBoard event-file writers they write to.

`SummaryScalar(step, value)` and `SummaryHistogram(step, values)` write one
TensorBoard event each (tag from the node's `tag` attr) to the writer of
the run, and output True; with no writer they write nothing and output
False (as `tf.summary.scalar` returns False without a default writer).

Which writer a run uses is decided once, when it starts, in the thread that
called `Session.run` (so the kernels on other threads agree):

1. the Session's `summary_dir=` option;
2. else the innermost `with writer.as_default():` of that thread
   (`dfc.summary.create_file_writer(logdir)`, as in tf.summary);
3. else the environment variable DFC_SUMMARY_DIR (how `dfc run` of a loaded
   graph writes summaries: `DFC_SUMMARY_DIR=logs dfc run g.json`);
4. else none. A graph file never names a directory: where summaries go is
   the caller's choice, not the graph's.

An op outside any run (eager mode, `dfc.config.run_functions_eagerly`, or
a summary op called on numpy values) finds its writer the same way (2-4)
and flushes at once.

Events are built and written by tensorboardX (its Summary protos, its
histogram binning and its synchronous `EventsWriter`), one event file per
log directory per process, flushed at the end of every run.
"""
import itertools
import os
import threading
import time

import numpy as np

from dfc import config
from dfc.errors import DfcError, DfcRuntimeError
from dfc.runtime.kernels.registry import host, kernel

ENV = "DFC_SUMMARY_DIR"

_writers = {}               # absolute log directory -> FileWriter
_writers_lock = threading.Lock()
_local = threading.local()  # .stack: the writers made default by `as_default()` in this thread
_file_numbers = itertools.count()


class FileWriter:
    """Writes TensorBoard events to an event file in `logdir` (made, with the directory, on the first
    event). Thread-safe. Get one with `writer(logdir)` / `dfc.summary.create_file_writer(logdir)`:
    one writer, and one event file, per directory per process."""

    def __init__(self, logdir):
        try:
            from tensorboardX import summary as tbx_summary
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto import event_pb2
        except ImportError:
            raise DfcError("summaries need the tensorboardX package: pip install 'dfc[summary]'") from None
        self.logdir = logdir
        self._tbx, self._events_writer, self._event_pb2 = tbx_summary, EventsWriter, event_pb2
        self._lock = threading.Lock()
        self._file = None

    def _write(self, summary, step):
        event = self._event_pb2.Event(summary=summary, step=int(step), wall_time=time.time())
        with self._lock:
            if self._file is None:
                try:
                    os.makedirs(self.logdir, exist_ok=True)
                    suffix = f".{os.getpid()}.{next(_file_numbers)}.dfc"
                    self._file = self._events_writer(os.path.join(self.logdir, "events"), suffix)
                except OSError as e:
                    raise DfcError(f"cannot write summaries to {self.logdir!r}: {e}") from None
            self._file.write_event(event)

    def scalar(self, tag, value, step):
        """Write scalar `value` (a float) under `tag` at `step`."""
        self._write(self._tbx.scalar(tag, float(value)), step)

    def histogram(self, tag, values, step):
        """Write a histogram of `values` (any shape; finite) under `tag` at `step` (TensorFlow's bins)."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size == 0:
            raise DfcRuntimeError(f"histogram {tag!r} of no values")
        if not np.all(np.isfinite(values)):
            raise DfcRuntimeError(f"histogram {tag!r} of values that are not finite (nan or inf)")
        self._write(self._tbx.histogram(tag, values, _tensorflow_bins()), step)

    def flush(self):
        """Write what is buffered to disk (every run ends with a flush)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self):
        """Flush and close the event file; a later event starts a new file in the same directory."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def as_default(self):
        """Context manager: runs started in this thread inside it write their summaries here."""
        return _Default(self)

    def __repr__(self):
        return f"FileWriter({self.logdir!r})"


class _Default:
    def __init__(self, w):
        self.writer = w

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self.writer)
        return self.writer

    def __exit__(self, *exc):
        _local.stack.pop()
        self.writer.flush()
        return False


_BINS = []


def _tensorflow_bins():
    """TensorFlow's histogram bucket edges (what tensorboardX's SummaryWriter uses for bins="tensorflow"):
    0 and +-1e-12 * 1.1**k up to 1e20."""
    if not _BINS:
        v, pos = 1e-12, []
        while v < 1e20:
            pos.append(v)
            v *= 1.1
        _BINS.extend([-x for x in reversed(pos)] + [0.0] + pos)
    return _BINS


def writer(logdir):
    """The FileWriter of `logdir` (made on first use; the same object for the same directory)."""
    if not isinstance(logdir, (str, os.PathLike)) or not str(logdir):
        raise DfcError(f"a summary log directory must be a path, got {logdir!r}")
    key = os.path.abspath(os.fspath(logdir))
    with _writers_lock:
        w = _writers.get(key)
        if w is None:
            w = _writers[key] = FileWriter(key)
        return w


def default_writer():
    """The writer of the innermost `as_default()` in this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def writer_for_run(summary_dir=None):
    """The writer a run started in this thread writes to (see the module docstring), or None."""
    if summary_dir is not None:
        return summary_dir if isinstance(summary_dir, FileWriter) else writer(summary_dir)
    w = default_writer()
    if w is not None:
        return w
    env = config.env(ENV)
    return writer(env) if env else None


_TRUE, _FALSE = np.array(True), np.array(False)
_TRUE.flags.writeable = _FALSE.flags.writeable = False     # shared: a caller gets a copy


def _summary_kernel(write):
    def factory(node, xp):
        tag = node.attrs["tag"]

        def f(ctx, a):
            w = getattr(ctx, "summary", None)
            auto = w == "auto"          # no run around this op (eager): its own writer, flushed at once
            if auto:
                w = writer_for_run()
            if w is None:
                return (_FALSE,)
            write(w, tag, host(a[1]), host(a[0]).item())
            if auto:
                w.flush()
            return (_TRUE,)
        return f
    return factory


kernel("SummaryScalar")(_summary_kernel(lambda w, tag, v, step: w.scalar(tag, v.item(), step)))
kernel("SummaryHistogram")(_summary_kernel(lambda w, tag, v, step: w.histogram(tag, v, step)))
