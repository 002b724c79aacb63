"""Python errors raised by the user's code while dfc traces it, re-raised at the user's line.

A `dfc.function` runs converted code (files named `<dfc:...>`) while tracing; a
Python exception from it (a NameError, a KeyError, a TypeError from a library
that got a symbolic tensor, a RecursionError of recursion on a tensor
condition) would show the converted source. `translate(e)` gives instead a
`DfcTracingError` naming the user's original file:line (mapped through the
source maps of origin.py) with a hint. It is also an instance of the original
exception's type where that is a plain built-in one, so `except KeyError`
around a call still works. The original exception is kept as `.original`.

Errors raised inside dfc's own code are not the user's (a dfc bug): they keep
their traceback and only get a note naming the user's line.
"""
import collections
import os

from dfc.compiler.autograph import origin
from dfc.errors import DfcConversionError, DfcError

_DFC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DfcTracingError(DfcConversionError):
    """A Python exception raised by the user's code while it was traced (see `original`)."""

    original = None

    def __str__(self):
        return self._format()


_classes = {}


def _class_for(exc_type):
    """A DfcTracingError class that is also an `exc_type` (so `except KeyError`, or a user's own
    exception class, still catches the translation), or DfcTracingError where Python cannot
    combine them (an exception type with its own C layout)."""
    cls = _classes.get(exc_type)
    if cls is None:
        try:
            cls = type(f"DfcTracing{exc_type.__name__}", (DfcTracingError, exc_type),
                       {"__doc__": f"A {exc_type.__name__} raised by the user's code while tracing.",
                        "__module__": __name__, "__str__": DfcTracingError.__str__})
        except TypeError:
            cls = DfcTracingError
        _classes[exc_type] = cls
    return cls


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame.f_code.co_filename, tb.tb_lineno
        tb = tb.tb_next


def _is_dfc_internal(filename):
    return os.path.abspath(filename).startswith(_DFC_DIR + os.sep)


# dfc modules that call what the user's code calls (converted_call, the tensor-aware builtins):
# an exception raised right there is the user's call failing (calling a tensor, a wrong argument).
_CALLERS = tuple(os.path.join(_DFC_DIR, "compiler", "autograph", m)
                 for m in ("calls.py", "py_builtins.py", "iterables.py"))


def raised_in_dfc(e):
    """Whether the innermost frame of e's traceback is dfc's own (not generated) code, other than
    the places that make the user's calls."""
    last = None
    for filename, _ in _frames(e.__traceback__):
        last = filename
    if last is None or last.startswith("<") or os.path.abspath(last) in _CALLERS:
        return False
    return _is_dfc_internal(last)


def user_origin(e):
    """(file, line) in the user's source where e was raised: the innermost frame of converted
    code (mapped back) or of a user file, whichever is deeper."""
    found = None
    for filename, lineno in _frames(e.__traceback__):
        mapped = origin.map_frame(filename, lineno)
        if mapped is not None:
            found = mapped
        elif not filename.startswith("<") and not _is_dfc_internal(filename) \
                and not _is_library(filename):
            found = (filename, lineno)
    return found


def _is_library(filename):
    from dfc.compiler.autograph.calls import _LIBRARY_DIRS
    path = os.path.abspath(filename)
    return any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS)


def recursion_origin(e):
    """The user line that recurs most often in e's traceback (the recursive call)."""
    counts = collections.Counter()
    for filename, lineno in _frames(e.__traceback__):
        mapped = origin.map_frame(filename, lineno)
        if mapped is not None:
            counts[mapped] += 1
    if not counts:
        return None
    return counts.most_common(1)[0][0]


def hint(e):
    """Advice for a Python exception raised while tracing, or None."""
    text = str(e)
    if isinstance(e, RecursionError):
        return ("recursion whose stopping condition is a tensor never ends while tracing: a tensor "
                "`if` traces both branches, so the recursive call is traced again and again. "
                "Write it as a loop (`while` on a tensor, or dfc.while_loop), or make the "
                "recursion depend on Python values only")
    if "Tensor" in text and isinstance(e, TypeError):
        if "not callable" in text:
            return "a symbolic tensor was called like a function"
        if "object cannot be interpreted as an integer" in text:
            return "use dfc.range for a tensor loop"
        return ("a Python or library function got a symbolic dfc tensor; use the dfc function "
                "of the same name (dfc.*), which runs in the graph")
    if isinstance(e, KeyError) and "dfc.Tensor" in text:
        return ("a symbolic tensor was used as a dict key (tensors hash by identity); index a "
                "stacked tensor with dfc.gather instead")
    if isinstance(e, IndexError) and "only integers" in text:
        return "to index a numpy array with a tensor use dfc.gather(arr, t)"
    return None


def _user_traceback(e):
    """The user's frames of e's traceback (converted code mapped back), as a traceback shows them."""
    import linecache
    from dfc.compiler.autograph.compile_file import user_frames
    lines = []
    for filename, lineno, func in user_frames(e.__traceback__):
        lines.append(f'  File "{filename}", line {lineno}, in {func}')
        text = linecache.getline(filename, lineno).strip()
        if text:
            lines.append(f"    {text}")
    return lines


def translate(e, name):
    """The DfcError to raise instead of e (raised while tracing dfc.function `name`), or None to
    re-raise e itself (a DfcError already, or a dfc bug: then e gets a note naming the user's
    line)."""
    if isinstance(e, DfcError):
        return None
    if isinstance(e, RecursionError):
        where = recursion_origin(e) or user_origin(e)
    elif raised_in_dfc(e):
        where = user_origin(e)
        if where is not None:
            e.add_note(f"dfc: raised while tracing dfc.function {name}, at {where[0]}:{where[1]} "
                       f"(the lines above marked <dfc:...> are its converted code)")
        return None
    else:
        where = user_origin(e)
    if where is None:
        return None
    advice = hint(e)
    lines = [f"{type(e).__name__} while tracing dfc.function {name!r}: {e}"]
    lines += _user_traceback(e)
    if advice:
        lines.append(f"hint: {advice}")
    message = "\n".join(lines)
    loc = f"{where[0]}:{where[1]}"
    try:
        err = _class_for(type(e))(message, loc=loc)
    except Exception:       # noqa: BLE001 - a built-in type that takes other arguments
        err = DfcTracingError(message, loc=loc)
    err.original = e
    return err
