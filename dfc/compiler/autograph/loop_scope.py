"""The tensor loops being traced, and what their bodies may not change in place.

A tensor loop's body is traced once but stands for any number of
iterations, so an in-place change of a Python object that existed before
the loop (`seen.add(x)`, `log.append(x)` on a global) would happen once, at
trace time. Lists the converter can see are carried through the loop as
TensorLists instead; every other such change is an error. A LoopScope
records the objects reachable from the loop's functions (closure cells,
referenced globals) when the loop starts; those are the "outer" objects.
"""
import collections
import threading
import types

from dfc.compiler.autograph.errors import DfcConversionError
from dfc.compiler.autograph.origin import user_location

_local = threading.local()

# methods that change a builtin container in place
MUTATORS = {
    list: {"append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
           "__setitem__", "__delitem__", "__iadd__", "__imul__"},
    dict: {"__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault",
           "__ior__"},
    set: {"add", "discard", "remove", "pop", "clear", "update", "intersection_update",
          "difference_update", "symmetric_difference_update", "__ior__", "__iand__", "__isub__",
          "__ixor__"},
    collections.deque: {"append", "appendleft", "extend", "extendleft", "pop", "popleft",
                        "remove", "clear", "rotate", "insert", "reverse", "__setitem__",
                        "__delitem__", "__iadd__"},
    bytearray: {"append", "extend", "insert", "remove", "pop", "clear", "reverse",
                "__setitem__", "__delitem__", "__iadd__"},
}
_MAX_DEPTH = 4
_MAX_FANOUT = 1000


class LoopScope:
    """Entered while a tensor loop's condition and body are traced."""

    def __init__(self, fns, carried_keys, loc):
        self.loc = loc
        self.list_keys = set(carried_keys)
        self._outer = _reachable(fns)       # id -> object (kept alive so ids stay unique)

    def __enter__(self):
        stack = _stack()
        stack.append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()

    def is_outer(self, obj):
        return id(obj) in self._outer


def _stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def carries(tensor_list):
    """True if a tensor loop being traced carries this TensorList as a loop variable."""
    return any(tensor_list.key in scope.list_keys for scope in _stack())


def outer_loop_of(obj):
    """The innermost tensor loop being traced for which obj existed before it started, or None."""
    for scope in reversed(_stack()):
        if scope.is_outer(obj):
            return scope
    return None


def check_mutation(obj, method):
    """Raise if `obj.method(...)` would change, once at trace time, an object from outside a
    tensor loop being traced."""
    scope = outer_loop_of(obj)
    if scope is None:
        return
    kind = type(obj).__name__
    if isinstance(obj, list) and method in ("append", "extend", "pop", "__setitem__",
                                            "__delitem__"):
        advice = ("change a list held in a local variable of the dfc.function (append, extend, "
                  "pop, xs[i] = v and del xs[i] carry it through the loop as tensors), or use "
                  "dfc.TensorArray")
    elif isinstance(obj, list):
        advice = ("use append, extend, pop, xs[i] = v or del xs[i] on a list held in a local "
                  "variable (they carry it through the loop as tensors), or dfc.TensorArray")
    else:
        advice = (f"a {kind} cannot change once per iteration of a graph loop: keep the values "
                  f"in tensors (a dfc.TensorArray, or a tensor updated with dfc.where), or move "
                  f"the call out of the loop")
    raise DfcConversionError(
        f"{kind}.{method}() changes a {kind} that exists before the tensor loop at {scope.loc}; "
        f"the loop body is traced once, so the change would happen once instead of once per "
        f"iteration. Instead, {advice}", loc=user_location())


def is_mutator(f):
    """The container a bound builtin method `f` changes in place, or None."""
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__name__", None)
    if owner is None or name is None or isinstance(owner, types.ModuleType):
        return None
    for kind, names in MUTATORS.items():
        if isinstance(owner, kind) and name in names:
            return owner
    return None


# ---------------------------------------------------------------- reachability
def _reachable(fns):
    found = {}
    todo = []
    for fn in fns:
        if fn is not None:
            todo.append((fn, 0))
    while todo:
        obj, depth = todo.pop()
        if id(obj) in found or isinstance(obj, (types.ModuleType, type, str, bytes, int, float)):
            continue
        found[id(obj)] = obj
        if depth < _MAX_DEPTH:
            todo.extend((child, depth + 1) for child in _children(obj))
    return found


def _children(obj):
    if isinstance(obj, types.FunctionType):
        out = [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
        for name in _global_names(obj.__code__):
            if name in obj.__globals__:
                out.append(obj.__globals__[name])
        return out
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        return list(obj) if len(obj) <= _MAX_FANOUT else []
    if isinstance(obj, dict):
        return list(obj.values()) if len(obj) <= _MAX_FANOUT else []
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return list(attrs.values()) if len(attrs) <= _MAX_FANOUT else []
    return []


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _global_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
