"""Run-time checks of the XLA lowering (lower.py): where dfc's numpy kernel raises on the values of a run
(an index out of range, an integer division by zero, a failed Assert, a TensorArray index out of range or
written twice or read unwritten, a pop from an empty stack), the compiled run records the failure
and program.py raises the same DfcError after the run, naming the node. XLA itself never raises: a gather
clamps an index out of range, a scatter drops it, an integer division by zero gives garbage. Without these
checks such a run would return a silently wrong answer.

The record is `state["err"]`: (code, a, b, c), carried through every loop with the rest of the state. Code 0
is no failure; otherwise (node index + 1) * 64 + part (part: the axis of an index, or 0), and a, b, c are what
the message needs (the bad index and the dimension's size, ...). The first failure wins, as in the reference
interpreter, which stops at the failing kernel; every loop stops once a failure is recorded (lower.py joins
`ok(state)` to each loop predicate), so garbage computed after it cannot make a loop run away. A check counts
only where its node is live: an index computed in a branch that was not taken raises nothing. A loop's
predicate is evaluated once more after the loop when it has a check, for the failures of its last evaluation
(the one that stopped the loop). An Assert's data (part of its message) is kept in `state["a<node>"]` from
its first failure; in a loop that slot exists before the loop, in the shapes the discover pass saw (kept in
the Lowerer's stack_avals under ("assert", node)). Most checks read a node's inputs before its lowering
(`check`); the linear algebra ones read its outputs (`after`).

Value fixes (where the XLA operation gives another answer than numpy) are in `lower`: float -> integer casts
give numpy's value (the lowest integer) for NaN, infinities and values out of range, where XLA saturates.

Not fixed, and stated as the backend's tolerance: XLA on CPU flushes subnormal floats to zero, in inputs and
results, comparisons included (numpy keeps them; no XLA flag of this jaxlib changes it); the sign of a zero
from Maximum/Minimum/Max/Min of +0 and -0 may differ (numpy's own depends on its SIMD loop).
"""
import numpy as np

import jax.numpy as jnp

from dfc.errors import DfcAssertionError, DfcError, DfcIndexError, DfcRuntimeError
from dfc.runtime.kernels.math_lower import cast_native
from dfc.runtime.limits import kernel_error
from dfc.runtime.xla import jops
from dfc.runtime.xla.jops import NotLowerable

PARTS = 64              # codes per node: one per axis an index may address
_NONE = (np.int32(0), np.int64(0), np.int64(0), np.int64(0))


# ---------------------------------------------------------------------------------------------- the record
def init(low, state):
    """The empty record and each Assert's data slots, in `state` at the start of a run."""
    state["err"] = tuple(jnp.asarray(v) for v in _NONE)
    if low.discover:
        return
    for key, avals in low.stack_avals.items():
        if isinstance(key, tuple) and key[0] == "assert":
            state[f"a{key[1]}"] = tuple(jnp.zeros(s, d) for s, d in avals)


def ok(state):
    """A traced bool: no failure recorded (a loop predicate joins it)."""
    return state["err"][0] == 0


def results(state):
    """What the run returns for `raise_first`."""
    data = {k: v for k, v in state.items() if k[:1] == "a" and k[1:].isdigit()}
    return {"err": state["err"], "assert_data": data}


def _record(state, lits, L, bad, code, a=0, b=0, c=0):
    """Record failure `code` (with a, b, c) where `bad` holds, the node is live, and nothing failed before."""
    lv = lits.value(L)
    bad = jnp.any(jnp.asarray(bad))
    if lv is not True:
        bad = bad & lv
    c0, a0, b0, cc0 = state["err"]
    first = bad & (c0 == 0)
    state["err"] = (jnp.where(first, np.int32(code), c0), jnp.where(first, jnp.asarray(a, np.int64), a0),
                    jnp.where(first, jnp.asarray(b, np.int64), b0), jnp.where(first, jnp.asarray(c, np.int64), cc0))
    return first


def _error_code(i, part=0):
    return (i + 1) * PARTS + part


# ---------------------------------------------------------------------------------------------- the checks
def _first_bad(idx, n):
    """(any index out of [-n, n), the first such index in C order)."""
    idx = jnp.asarray(idx).reshape(-1)
    bad = (idx < -n) | (idx >= n)
    return jnp.any(bad), idx[jnp.argmax(bad)]


def _index(state, lits, L, i, idx, n, axis):
    """numpy's IndexError of an index array `idx` into a dimension of size n (axis: the message's axis)."""
    if jnp.size(idx) == 0:
        return
    bad, v = _first_bad(idx, n)
    _record(state, lits, L, bad, _error_code(i, axis), v, n)


def _spec_axes(spec, ndim):
    """For each spec item, the axis of x it indexes (None for newaxis and ellipsis)."""
    consuming = sum(item[0] in ("int", "slice", "tensor") for item in spec)
    out, pos = [], 0
    for item in spec:
        if item[0] == "ellipsis":
            pos += ndim - consuming
            out.append(None)
        elif item[0] == "newaxis":
            out.append(None)
        else:
            out.append(pos)
            pos += 1
    return out


def _getitem(low, node, i, vals, L, state, lits, shape, dyn):
    spec = node.attrs["spec"]
    for item, axis in zip(spec, _spec_axes(spec, len(shape))):
        if axis is None or axis >= len(shape):
            continue
        if item[0] == "int" and isinstance(item[1], dict):
            v = dyn[item[1]["t"]]
        elif item[0] == "tensor":
            v = dyn[item[1]]
        else:
            continue            # a constant int was checked when the graph was traced; slices clamp
        if not isinstance(v, (np.ndarray, np.generic)) or np.any((v < -shape[axis]) | (v >= shape[axis])):
            _index(state, lits, L, i, v, shape[axis], axis)


def _check_getitem(low, node, i, vals, L, state, lits):
    _getitem(low, node, i, vals, L, state, lits, jnp.shape(vals[0]), vals[1:])


def _check_getitem_grad(low, node, i, vals, L, state, lits):
    shape = jops.static(vals[1], node, "shape").reshape(-1)
    _getitem(low, node, i, vals, L, state, lits, tuple(int(d) for d in shape), vals[2:])


def _check_gather(low, node, i, vals, L, state, lits):
    x = jnp.asarray(vals[0])
    ax = node.attrs.get("axis", 0)
    n = x.shape[ax] if x.ndim else 0
    _index(state, lits, L, i, vals[1], n, ax % max(x.ndim, 1))


def _check_scatter_add(low, node, i, vals, L, state, lits):
    shape = tuple(int(d) for d in jops.static(vals[0], node, "shape").reshape(-1))
    ax = node.attrs.get("axis", 0)
    _index(state, lits, L, i, vals[1], shape[ax] if shape else 0, 0)     # the kernel indexes a moved axis 0


def _along_axis(state, lits, L, i, shape, idx, ax):
    idx = jnp.asarray(idx)
    if idx.size == 0:
        return
    n = shape[ax % max(len(shape), 1)]
    _record(state, lits, L, jnp.any((idx < -n) | (idx >= n)), _error_code(i), jnp.min(idx), jnp.max(idx), n)


def _check_take_along_axis(low, node, i, vals, L, state, lits):
    _along_axis(state, lits, L, i, jnp.shape(vals[0]), vals[1], node.attrs["axis"])


def _check_take_along_axis_grad(low, node, i, vals, L, state, lits):
    shape = tuple(int(d) for d in jops.static(vals[1], node, "shape").reshape(-1))
    _along_axis(state, lits, L, i, shape, vals[2], node.attrs["axis"])


def _check_int_divisor(low, node, i, vals, L, state, lits):
    x = jnp.asarray(vals[0])
    if x.dtype.kind == "i":
        _record(state, lits, L, jnp.asarray(vals[1]) == 0, _error_code(i))


def _check_int_pow(low, node, i, vals, L, state, lits):
    if jnp.asarray(vals[0]).dtype.kind == "i":
        _record(state, lits, L, jnp.asarray(vals[1]) < 0, _error_code(i))


_CHECKS = {
    "GetItem": _check_getitem, "GetItemGrad": _check_getitem_grad, "Gather": _check_gather,
    "ScatterAdd": _check_scatter_add, "TakeAlongAxis": _check_take_along_axis,
    "TakeAlongAxisGrad": _check_take_along_axis_grad, "FloorDiv": _check_int_divisor,
    "Mod": _check_int_divisor, "Pow": _check_int_pow,
}


def check(low, node, i, vals, L, state, lits):
    """Record the failure the numpy kernel of `node` would raise on `vals` (before its lowering runs)."""
    fn = _CHECKS.get(node.op)
    if fn is not None:
        fn(low, node, i, vals, L, state, lits)


def rechecks(plan, items):
    """Whether any of `items` (a loop's predicate computation) has a check: its last evaluation, which
    stops the loop, runs again after the loop to record its failures."""
    return any(it[0] == "node" and (plan.nodes[it[1]].op in _CHECKS or plan.nodes[it[1]].op in _LINALG
                                    or plan.nodes[it[1]].op in EFFECTS) for it in items)


# ---------------------------------------------------------------------------------------------- after lowering
# numpy's LAPACK raises LinAlgError where XLA's factorizations give NaN or infinity: a matrix that is not
# positive definite, an exactly singular one (a zero pivot divides). With finite inputs, a non-finite result
# is that failure (numpy too would give infinity only on overflow, which these factorizations do not reach
# for matrices numpy accepts).
_LINALG = {"Cholesky": "Matrix is not positive definite", "MatrixSolve": "Singular matrix",
           "MatrixInverse": "Singular matrix"}


def after(low, node, i, vals, outs, L, state, lits):
    """Record the failure the numpy kernel of `node` would raise, seen in its lowered outputs."""
    if node.op in _LINALG:
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(jnp.asarray(v))) for v in vals]))
        _record(state, lits, L, finite & ~jnp.all(jnp.isfinite(outs[0])), _error_code(i))


# ---------------------------------------------------------------------------------------------- state
# The failures of TensorArrays and stacks (state.py), as parts of their node's code.
NEGATIVE, OUT_OF_RANGE, TWICE, UNWRITTEN, EMPTY = 1, 2, 3, 4, 5
_STATE_MESSAGES = {
    NEGATIVE: "TensorArray index {a} is negative", OUT_OF_RANGE: "TensorArray index {a} out of range (size {b})",
    TWICE: "TensorArray index {a} written twice", UNWRITTEN: "TensorArray index {a} read before it was written",
}


def fail(state, lits, L, bad, i, part, a=0, b=0):
    """Record state failure `part` of node i where `bad` holds (see _record)."""
    _record(state, lits, L, bad, _error_code(i, part), a, b)


# ---------------------------------------------------------------------------------------------- effects
EFFECTS = frozenset({"Assert"})


def effect(low, node, i, vals, L, state, lits):
    """An Assert: record its failure, keeping its data for the message. Returns its (no) outputs."""
    data = [jnp.asarray(v) for v in vals[1:]]
    if low.discover:
        low.stack_avals[("assert", i)] = [(d.shape, d.dtype) for d in data]
        return []
    first = _record(state, lits, L, ~jnp.all(jnp.asarray(vals[0])), _error_code(i))
    if data:
        # outside loops the Assert runs once (its slot need not exist before, and its data's shapes may change
        # between compilations, e.g. a stacked TensorArray's length); in a loop, the slot made by `init`
        old = state[f"a{i}"] if low.depth else [jnp.zeros_like(d) for d in data]
        state[f"a{i}"] = tuple(jnp.where(first, d, s) for d, s in zip(data, old))
    return []


# ---------------------------------------------------------------------------------------------- values
_INT_RANGE = {"int32": (-2.0 ** 31, 2.0 ** 31), "int64": (-2.0 ** 63, 2.0 ** 63)}


def _cast(node, vals):
    x, dst = jnp.asarray(vals[0]), np.dtype(node.attrs["dtype"]).name
    if x.dtype.kind != "f" or dst not in _INT_RANGE:
        return None
    if not cast_native():
        raise NotLowerable("a float -> integer cast: numpy's loops on this machine give values out of range "
                           "otherwise than the lowest integer", node=node.name)
    lo, hi = _INT_RANGE[dst]
    inside = (x >= lo) & (x < hi)       # false for NaN
    return [jnp.where(inside, jnp.where(inside, x, 0).astype(dst), np.iinfo(dst).min)]


_EXACT = {"Cast": _cast}


def lower(node, vals):
    """The outputs of `node` (jops.lower, with numpy's values where XLA's differ). An error while tracing
    (a shape XLA cannot take) is NotLowerable: where that node runs, the other paths raise dfc's error, and
    where it is in a branch not taken they raise nothing."""
    try:
        fix = _EXACT.get(node.op)
        outs = fix(node, vals) if fix is not None else None
        return outs if outs is not None else jops.lower(node, vals)
    except DfcError:
        raise
    except Exception as e:      # noqa: BLE001 — any error of jax's tracing: the node is refused, named
        raise NotLowerable(f"{node.op}: XLA cannot lower it here ({type(e).__name__}: {e})"[:500],
                           node=node.name) from None


# ---------------------------------------------------------------------------------------------- raising
def _host(v):
    return np.asarray(v)


def raise_first(plan, errors):
    """Raise the DfcError of the run's first recorded failure, as the numpy kernel raises it."""
    code, a, b, c = (int(v) for v in errors["err"])
    if code == 0:
        return
    i, part = divmod(code, PARTS)
    node = plan.nodes[i - 1]
    op = node.op
    if op == "Assert":
        data = errors["assert_data"].get(f"a{i - 1}", ())
        msg = node.attrs.get("message", "")
        text = ", ".join(str(_host(v)) for v in data)
        raise DfcAssertionError(f"assertion failed: {msg}" + (f" [{text}]" if text else ""), node=node.name,
                                loc=node.loc)
    if op == "StackPop":
        raise kernel_error(node, DfcRuntimeError("pop from an empty stack", node=node.name))
    if op.startswith("TensorArray"):
        raise kernel_error(node, DfcRuntimeError(_STATE_MESSAGES[part].format(a=a, b=b)))
    if op in _LINALG:
        e = np.linalg.LinAlgError(_LINALG[op])
    elif op in ("TakeAlongAxis", "TakeAlongAxisGrad"):
        e = DfcIndexError(f"take_along_axis index out of range: indices span [{a}, {b}] for a dimension "
                          f"of size {c}")
    elif op in ("FloorDiv", "Mod"):
        e = ZeroDivisionError(f"integer {'division' if op == 'FloorDiv' else 'modulo'} by zero")
    elif op == "Pow":
        e = ValueError("integers to negative integer powers are not allowed")
    else:
        e = IndexError(f"index {a} is out of bounds for axis {part} with size {b}")
    raise kernel_error(node, e)
