"""converted_call: calls from converted code, converting user functions on the way.

User functions (and methods, lambdas, callable objects) are converted
recursively at trace time, cached per code object. Library code (dfc,
numpy, the standard library, installed packages, builtins) runs as it is,
except a few builtins that get tensor-aware versions (print, len, range,
enumerate, zip, min, max, sum, any, all, abs). A library call that changes a
Python container from outside a tensor loop being traced is an error (see
loop_scope); numpy/Python random draws while tracing are warned about.
"""
import builtins
import functools
import inspect
import os
import random
import sys
import sysconfig
import warnings

from dfc.compiler import ops_api
from dfc.compiler.autograph import core, iterables, loop_scope, origin, py_builtins, strings, \
    tensor_list
from dfc.compiler.autograph.errors import DfcConversionError, DfcTraceTimeRandomWarning
from dfc.compiler.autograph.origin import user_location

_DFC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                              for p in [sysconfig.get_paths().get(key)] if p}))


def print_(*values, sep=" ", end="\n", file=None, flush=False):
    """print; with a tensor (or an f-string of one) among the values, a dfc.print that prints
    when the graph runs."""
    if any(core.is_tensor(v) or isinstance(v, strings.SymbolicString) for v in values):
        if file is not None:
            raise DfcConversionError("print(..., file=...) of a symbolic tensor: graph printing "
                                     "(dfc.print) writes to standard output only",
                                     loc=user_location())
        return ops_api.print(*values, sep=sep, end=end)
    return builtins.print(*values, sep=sep, end=end, file=file, flush=flush)


def bool_(x=False):
    if core.is_tensor(x):
        raise DfcConversionError(
            "bool() of a symbolic tensor: its value is only known when the graph runs; use it "
            "directly as an `if`/`while` condition, or compare it (x != 0)", loc=user_location())
    return builtins.bool(x)


_BUILTINS = {
    builtins.print: print_,
    builtins.len: iterables.len_,
    builtins.range: iterables.range_,
    builtins.enumerate: iterables.enumerate_,
    builtins.zip: iterables.zip_,
    builtins.bool: bool_,
    builtins.max: py_builtins.max_,
    builtins.min: py_builtins.min_,
    builtins.sum: py_builtins.sum_,
    builtins.any: py_builtins.any_,
    builtins.all: py_builtins.all_,
    builtins.abs: py_builtins.abs_,
}


def is_library(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    path = os.path.abspath(code.co_filename)
    if path.startswith(_DFC_DIR + os.sep):
        return True
    if code.co_filename.startswith("<"):
        return code.co_filename.startswith("<dfc:")
    return any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS)


def converted_call(f, args, kwargs=None):
    """f(*args, **kwargs), with f converted first when it is user code."""
    kwargs = kwargs or {}
    special = _BUILTINS.get(f) if _hashable(f) else None
    if special is not None:
        return special(*args, **kwargs)
    target = _conversion_target(f)
    if target is not None:
        _record_callee(f, sys._getframe(1).f_code.co_filename)
    if target is None:
        changed = loop_scope.is_mutator(f)
        if changed is not None:
            loop_scope.check_mutation(changed, f.__name__)
        _warn_if_random(f)
        if _is_dfc_stack(f) and args and isinstance(args[0], tensor_list.TensorList):
            return args[0].stack(*args[1:], **kwargs)
        args = tuple(tensor_list.stacked(a) for a in args)
        return f(*args, **kwargs)
    return target(*args, **kwargs)


def _record_callee(f, caller_filename):
    """Note (for f.code) which user function the converted code in caller_filename called."""
    from dfc.compiler.autograph import conversion
    from dfc.compiler.autograph.function import Function
    while isinstance(f, functools.partial):
        f = f.func
    if inspect.ismethod(f):
        f = f.__func__
    if isinstance(f, Function):
        f = f.python_function
    if not inspect.isfunction(f):
        f = getattr(type(f), "__call__", None)
    if inspect.isfunction(f) and caller_filename.startswith("<dfc:"):
        conversion.record_callee(caller_filename, f)


def user_function(fn):
    """Whether fn is a user function that converted_call converts."""
    return (inspect.isfunction(fn) and not is_library(fn) and not inspect.isgeneratorfunction(fn)
            and not inspect.iscoroutinefunction(fn))


def _warn_if_random(f):
    """numpy / Python random numbers drawn while tracing are constants of the graph."""
    owner = getattr(f, "__self__", None)
    if not isinstance(owner, _random_sources()) or getattr(f, "__name__", "") in _NOT_DRAWS:
        return
    module = "random" if isinstance(owner, random.Random) else "numpy.random"
    filename, lineno = origin.user_frame() or ("<unknown>", 0)
    warnings.warn_explicit(
        f"{module} {f.__name__}() called inside a dfc.function runs once, while tracing: the "
        f"number it draws becomes a constant of the graph, the same on every call. Draw random "
        f"numbers when the graph runs with dfc.random_uniform(shape, minval, maxval) or "
        f"dfc.random_normal(shape, mean, stddev)", DfcTraceTimeRandomWarning, filename, lineno)


_NOT_DRAWS = {"seed", "get_state", "set_state", "getstate", "setstate", "spawn", "bit_generator"}


def _random_sources():
    import numpy as np
    return (random.Random, np.random.RandomState, np.random.Generator)


def _hashable(f):
    try:
        hash(f)
        return True
    except TypeError:
        return False


def _is_dfc_stack(f):
    return getattr(f, "__name__", None) == "stack" and getattr(f, "__module__", "").startswith("dfc")


def _conversion_target(f):
    """The converted callable to use instead of f, or None to call f as it is."""
    from dfc.compiler.autograph.function import Function
    if isinstance(f, Function):
        return f.converted_python_function()
    if getattr(f, "__dfc_converted__", False):
        return None
    if isinstance(f, functools.partial):
        inner = _conversion_target(f.func)
        return None if inner is None else functools.partial(inner, *f.args, **f.keywords)
    if inspect.ismethod(f):
        if isinstance(f.__func__, Function):
            return f.__func__.converted_python_function().__get__(f.__self__)
        inner = _convertible(f.__func__)
        return None if inner is None else inner.__get__(f.__self__)
    if inspect.isfunction(f):
        return _convertible(f)
    if not inspect.isclass(f) and not inspect.isbuiltin(f) and callable(f):
        call = getattr(type(f), "__call__", None)
        if inspect.isfunction(call):
            inner = _convertible(call)
            return None if inner is None else inner.__get__(f)
    return None


def _convertible(fn):
    from dfc.compiler.autograph import conversion, parser
    if is_library(fn) or inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn):
        return None
    try:
        return conversion.convert(fn)
    except parser.SourceUnavailable:
        return None
