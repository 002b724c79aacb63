"""Splitting the state of a converted if/loop into what the graph carries.

A state is one value per variable. Each value is split into leaves
(dfc.nest order): *dynamic* leaves (tensors, TensorArrays, TensorLists,
Python and numpy numbers) go through dfc.cond / dfc.while_loop; *static*
leaves (None, strings, functions, objects) must be the same object on every
path and are kept as they are. A `VarPlan` records that split so the values
can be rebuilt from the graph's outputs.
"""
import numpy as np

from dfc import nest
from dfc.compiler import ops_api
from dfc.compiler.autograph import core
from dfc.compiler.autograph.errors import (DfcLoopVariableError, DfcUndefinedVariableError,
                                           describe)
from dfc.compiler.autograph.special_values import Undefined, UndefinedReturnValue, is_undefined
from dfc.compiler.autograph.tensor_list import TensorList

DYN, STATIC, LIST = "dyn", "static", "list"
RETURN_VALUE = "retval_"  # the Returns converter's variable (errors.INTERNAL_NAMES)


class Replan(Exception):
    """Abandon this trace of a cond/loop and build it again with `plans`."""

    def __init__(self, plans, casts=None):
        super().__init__("replan")
        self.plans, self.casts = plans, casts or {}


def leaf_kind(x):
    if isinstance(x, TensorList):
        return LIST if x.typed else STATIC
    if core.is_tensor(x) or core.is_tensor_array(x):
        return DYN
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)) and not isinstance(x, str):
        return DYN
    return STATIC


class VarPlan:
    """How one variable's value is split; `undefined` when it has none."""

    def __init__(self, name, value):
        self.name = name
        self.undefined = is_undefined(value)
        self.value = value
        if self.undefined:
            self.leaves, self.kinds = [], []
        else:
            self.leaves = nest.flatten(value)
            self.kinds = [leaf_kind(x) for x in self.leaves]
        self.placeholder = None  # [(dtype, shape) or python zero] when filled in

    @property
    def is_return_value(self):
        return isinstance(self.value, UndefinedReturnValue)

    def leaf_names(self):
        label = describe(self.name).strip("'")
        if len(self.leaves) == 1 and not nest.is_nested(self.value):
            return [label]
        return [f"{label}[{i}]" for i in range(len(self.leaves))]

    def dynamic(self, leaves=None):
        leaves = self.leaves if leaves is None else leaves
        out = []
        for x, kind in zip(leaves, self.kinds):
            if kind == DYN:
                out.append(x)
            elif kind == LIST:
                out.append(x.ta)
        return out

    def rebuild(self, dynamic_iter):
        """The variable's value from the graph's outputs (consumes its dynamic leaves)."""
        if self.undefined:
            return self.value
        leaves = []
        for x, kind in zip(self.leaves, self.kinds):
            if kind == DYN:
                leaves.append(next(dynamic_iter))
            elif kind == LIST:
                leaves.append(TensorList(next(dynamic_iter), x.dtype, x.element_shape, x.items, x.key))
            else:
                leaves.append(x)
        return nest.pack_sequence_as(self.value, leaves)


def plans_for(names, values):
    return [VarPlan(n, v) for n, v in zip(names, values)]


def dynamic_values(plans, values=None):
    out = []
    for i, plan in enumerate(plans):
        if values is None:
            out.extend(plan.dynamic())
        else:
            out.extend(plan.dynamic(nest.flatten(values[i]) if not plan.undefined else []))
    return out


def dynamic_names(plans):
    out = []
    for plan in plans:
        names = plan.leaf_names()
        out.extend(n for n, k in zip(names, plan.kinds) if k in (DYN, LIST))
    return out


def rebuild(plans, dynamic):
    it = iter(dynamic)
    return tuple(plan.rebuild(it) for plan in plans)


def placeholder_spec(value):
    """What placeholder_from_spec needs to make zeros like `value` later."""
    def spec(x):
        if core.is_tensor(x):
            return ("tensor", x.dtype, tuple(d if d is not None else 0 for d in (x.shape or ())))
        if isinstance(x, (bool, int, float)):
            return ("python", type(x)(0))
        if isinstance(x, (np.generic, np.ndarray)):
            return ("python", np.zeros_like(x))
        return ("python", x)
    return nest.map_structure(spec, value) if nest.is_nested(value) else spec(value)


def placeholder_from_spec(spec):

    def make(s):
        if s[0] == "tensor":
            return ops_api.zeros(list(s[2]), s[1])
        return s[1]
    if isinstance(spec, tuple) and spec and spec[0] in ("tensor", "python") and len(spec) in (2, 3) \
            and isinstance(spec[0], str):
        return make(spec)
    return _map_specs(make, spec)


def _map_specs(fn, spec):
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str) and spec[0] in ("tensor", "python"):
        return fn(spec)
    if isinstance(spec, dict):
        return {k: _map_specs(fn, v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_map_specs(fn, v) for v in spec)
    return spec


def _same_static(a, b):
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def check_compatible(first, second, loc, where):
    """Check two plans of one variable agree; return the merged plan or raise.

    `where` is 'cond' (first/second are the two branches) or 'loop' (first is
    the value entering the loop, second the value after one iteration).
    """
    name = describe(first.name)
    if first.undefined and second.undefined:
        return first
    if first.undefined or second.undefined:
        defined = second if first.undefined else first
        undefined = first if first.undefined else second
        if undefined.is_return_value:
            merged = VarPlan(defined.name, defined.value)
            merged.placeholder = placeholder_spec(defined.value)
            return merged
        if where == "cond":
            raise DfcUndefinedVariableError(
                f"{name} is defined in only one branch of this tensor `if` but is used "
                f"afterwards; give it a value before the `if` or in both branches", loc=loc)
        raise DfcUndefinedVariableError(
            f"{name} is first created inside this tensor loop and used after it (or in a later "
            f"iteration), but a tensor loop may run zero times; give {name} a value before the "
            f"loop", loc=loc)
    if not nest.same_structure(first.value, second.value):
        what = ("the two branches of this tensor `if`" if where == "cond"
                else "iterations of this tensor loop")
        hint = ""
        if isinstance(first.value, list) or isinstance(second.value, list):
            hint = ("; a list that grows must be appended to in a tensor loop (it becomes a "
                    "TensorArray) or built with dfc.TensorArray")
        raise DfcLoopVariableError(
            f"{name} has a different structure in {what}: {_shape_of(first.value)} vs "
            f"{_shape_of(second.value)}{hint}", loc=loc)
    for a, b, ka, kb in zip(first.leaves, second.leaves, first.kinds, second.kinds):
        if ka == kb == STATIC:
            if not _same_static(a, b):
                raise DfcLoopVariableError(
                    f"{name} is a Python value ({_short(a)}) that becomes {_short(b)} "
                    f"{'in the other branch of a tensor `if`' if where == 'cond' else 'inside a tensor loop'}"
                    f"; only tensors and numbers can change in graph control flow", loc=loc)
        elif ka != kb:
            if STATIC in (ka, kb):
                static = a if ka == STATIC else b
                if isinstance(static, TensorList):
                    continue  # empty untyped list: handled by the loop
                if static is None and name == describe(RETURN_VALUE):
                    raise DfcLoopVariableError(
                        "this function returns a tensor on one path and None on another (a bare "
                        "`return`, or reaching its end after this statement) that a tensor "
                        "condition chooses between; return a tensor on every path", loc=loc)
                raise DfcLoopVariableError(
                    f"{name} is {_short(static)} on one path and a tensor on another "
                    f"({'tensor `if`' if where == 'cond' else 'tensor loop'}); give it a tensor "
                    f"value on every path", loc=loc)
    return first


def same_plan(a, b):
    if a.undefined != b.undefined or a.kinds != b.kinds or (a.placeholder is None) != (b.placeholder is None):
        return False
    if a.undefined:
        return True
    if not nest.same_structure(a.value, b.value):
        return False
    for x, y, k in zip(a.leaves, b.leaves, a.kinds):
        if k == STATIC and not _same_static(x, y):
            return False
    return True


def _short(x):
    if x is None:
        return "None"
    if isinstance(x, Undefined):
        return "undefined"
    text = repr(x)
    return text if len(text) < 40 else type(x).__name__


def _shape_of(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_shape_of(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_shape_of(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return "tensor" if core.is_tensor(value) else type(value).__name__
