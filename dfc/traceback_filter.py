"""Tracebacks of DfcErrors show the user's frames, not dfc's (as JAX hides its own).

The public entry points (a dfc.function's call and trace, dfc.trace, dfc.gradients, Session.run and
graph calls) are wrapped in `api_boundary`. When a DfcError leaves the outermost of them, the
frames of code inside the dfc package are dropped from its traceback: what remains are the user's
frames (their script, their converted functions), the boundary's own frame, and the error, whose
message names the user's file:line. ``DFC_TRACEBACK=full`` (or ``dfc.config.set_traceback("full")``,
or the CLI's ``--debug``) keeps every frame. Only DfcErrors are filtered: any other exception out
of dfc is a bug whose frames are needed to fix it.
"""
import functools
import os
import threading
import types

from dfc import config
from dfc.errors import DfcError

_DFC_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NOTE = ("(dfc's own frames are hidden from this traceback; set DFC_TRACEBACK=full or run the CLI "
         "with --debug to see them)")
_local = threading.local()


def filter_traceback(tb):
    """The traceback `tb` without the entries of frames whose code lies in the dfc package."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_DFC_DIR):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = types.TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def api_boundary(fn):
    """`fn`, whose DfcErrors leave with a filtered traceback when this is the outermost boundary
    on the thread (an inner one leaves the traceback whole: dfc code above it may still read it)."""
    @functools.wraps(fn)
    def boundary(*args, **kwargs):
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        except DfcError as e:
            if depth or config.traceback_mode() == "full":
                raise
            if _NOTE not in getattr(e, "__notes__", ()):
                e.add_note(_NOTE)
            raise e.with_traceback(filter_traceback(e.__traceback__))     # its cause and context stay
        finally:
            _local.depth = depth
    return boundary
