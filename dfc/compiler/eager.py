"""Eager execution: dfc ops outside any graph, and dfc.functions run as plain Python.

Outside a graph (no dfc.trace / dfc.function trace in progress) `current_builder()`
is the EagerBuilder below. Its `make` is Builder.make without a graph: the same
attr checks and dtype/shape rule (dfc/ir/ops.py), then the op's runtime kernel
(dfc/runtime/kernels) runs at once on numpy values. So every registered op,
whoever adds it, computes eagerly with the graph's semantics; the op functions
return numpy arrays (0-d for scalars).

Inside the op functions numpy values stand for tensors: `convert` gives an
EagerTensor (a Tensor holding its value), so the dtype rules of ops_api (weak
Python scalars, promotion, casts) are the ones a graph applies to its inputs.

`run_function` is a dfc.function's call in eager mode
(dfc.config.run_functions_eagerly): the user's Python is called as it is,
with numpy arguments, and its results get the nesting and dtypes a graph's
results would have.
"""
import itertools

import numpy as np

from dfc import nest
from dfc.errors import DfcAssertionError, DfcError, DfcInputError, DfcRuntimeError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.dtypes import TType
from dfc.ir.graph import Node
from dfc.compiler import tracing
from dfc.compiler.tracing import Tensor, const_array, user_location

_draws = itertools.count(1)      # every eager random op is a fresh draw (its "run" number)


class EagerBuilder:
    """Stands in for a Builder when no graph is being built: `make` computes the op at once."""

    eager = True
    ctx = None

    def __init__(self):
        self.devices = []         # dfc.device scopes are accepted; eager ops run on the host

    def unique(self, base):
        return base

    def make(self, op, inputs=(), attrs=None, name=None, control=(), ctx="current", out_ctx="same",
             raw=False, ordered=True):
        """Run op `op` on `inputs` now: the graph's attr and type checks, then its kernel. Returns
        the outputs: numpy arrays, or the resource objects (TensorArray storage) the kernel made.
        Control inputs and program order need nothing: eager ops run in program order."""
        opdef = opreg.get(op)
        loc = user_location()
        values, types = [], []
        for x in inputs:
            v, t = _operand(x, loc)
            values.append(v)
            types.append(t)
        try:
            attrs = opreg.canonical_attrs(op, attrs or {})
            opdef.check_arity(len(values))
            opdef.infer(attrs, types)
        except DfcError as e:
            raise type(e)(e.message, loc=loc) from None
        if opdef.in_executor:
            raise DfcError(f"{op} is a control-flow primitive; it runs only in a graph", loc=loc)
        node = Node(name or op.lower(), op, [], attrs, None, loc)
        from dfc.runtime.kernel_context import KernelContext
        from dfc.runtime.executor import default_printer
        from dfc.runtime.kernels import kernel_for
        from dfc.runtime.limits import kernel_error
        ctx = KernelContext(printer=default_printer)     # the printer a Session uses
        if opdef.stateful:
            ctx.run_count = next(_draws)
        try:
            with np.errstate(all="ignore"):     # as in the runtime: inf/nan, not warnings
                outs = kernel_for(node, np)(ctx, values)
                if opdef.async_kernel:      # a queue op that may wait: wait here (dfc/runtime/kernels/queue_kernels.py)
                    outs = outs.wait()
        except Exception as e:   # noqa: BLE001 — a failing kernel is the user's error, at the user's line
            err = kernel_error(node, e)
            if isinstance(err, DfcError) and err.loc is None:
                err = type(err)(err.message, node=err.node, loc=loc)
            raise err from None
        return [_result(v) for v in outs]

    def make1(self, op, inputs=(), attrs=None, **kw):
        return self.make(op, inputs, attrs, **kw)[0]


BUILDER = EagerBuilder()


def is_value(x):
    """A numpy value: what stands for a tensor outside a graph."""
    return isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, (np.str_, np.bytes_))


def outside_graph():
    return tracing.current_builder(required=False) is None


_NAMES = {np.dtype(n): n for n in dt.ALL}     # numpy dtype -> dfc name (dtype.name is slow)


def lift(x):
    """Outside a graph a numpy value plays the part of a tensor (strongly typed, like a graph
    input); anything else is returned as it is."""
    if is_value(x) and outside_graph():
        return EagerTensor(x if x.dtype in _NAMES else const_array(x))
    return x


def constant(x, dtype=None):
    """convert() outside a graph: an EagerTensor of x (Python scalars typed as in a graph)."""
    if isinstance(x, Tensor):
        if dtype is not None and dt.as_dtype(dtype) != x.dtype:
            from dfc.compiler.ops_api import cast
            return EagerTensor(cast(x, dtype))
        return x
    if dtype is None and isinstance(x, np.ndarray) and x.dtype in _NAMES:
        return EagerTensor(x)
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tensor) or is_value(v) for v in nest.flatten(x)):
        from dfc.compiler.ops_api import stack
        return EagerTensor(stack([tracing.convert(v, dtype) for v in x]))
    try:
        return EagerTensor(const_array(x, dtype))
    except DfcError as e:
        raise type(e)(e.message, loc=user_location()) from None


def _operand(x, loc):
    """(value, TType) of one input of an eager op."""
    if isinstance(x, EagerTensor):
        return x.value, x.ttype
    if isinstance(x, Tensor):
        raise DfcError(f"symbolic tensor {x.ref} was used outside the graph that made it (by an op run "
                       f"eagerly); return it from the traced function instead", loc=loc)
    if is_value(x) or isinstance(x, (bool, int, float, list, tuple)) or hasattr(x, "_dfc_tensor"):
        t = tracing.convert(x)
        return t.value, t.ttype
    return x, TType(dt.HANDLE, ())     # a resource: TensorArray storage, a stack


def _result(v):
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, np.generic) or hasattr(v, "__cuda_array_interface__"):
        return np.asarray(v)
    return v


def value_of(x):
    """The numpy value behind x (an EagerTensor's value; other values as they are)."""
    return x.value if isinstance(x, EagerTensor) else x


class EagerTensor(Tensor):
    """A tensor whose value is known: what `convert` gives outside a graph.

    The op functions return numpy arrays, not EagerTensors; one that reaches user code anyway
    behaves like its numpy value (truth value, int(), numpy functions, printing)."""

    __slots__ = ("value",)

    def __init__(self, value):
        value = np.asarray(value)
        name = _NAMES.get(value.dtype) or value.dtype.name
        super().__init__(BUILDER, "eager", 0, TType(name, value.shape, value), None)
        self.value = value

    def numpy(self):
        return self.value

    def __array__(self, dtype=None, copy=None):
        return self.value if dtype is None else self.value.astype(dtype)

    def __repr__(self):
        return f"<dfc.Tensor (eager) {self.value!r}>"

    def __str__(self):
        return str(self.value)

    def __format__(self, spec):
        return format(self.value, spec)

    def __bool__(self):
        return bool(self.value)

    def __int__(self):
        return int(self.value)

    def __float__(self):
        return float(self.value)

    def __index__(self):
        return self.value.__index__()

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        return iter(self.value)

    def __getattr__(self, name):
        if name.startswith("_") or name == "value":
            raise AttributeError(name)
        return getattr(self.value, name)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [value_of(x) for x in inputs]
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*nest.map_structure(value_of, list(args)), **nest.map_structure(value_of, dict(kwargs)))


# ---------------------------------------------------------------- control flow, eagerly


def truth(pred, what, loc):
    """The Python truth value of a scalar predicate (a DfcTypeError for any other shape)."""
    p = np.asarray(value_of(pred))
    if p.shape != ():
        raise DfcTypeError(f"{what} must be a scalar, got shape {dt.format_shape(p.shape)}", loc=loc)
    return bool(p)


def cond(pred, true_fn, false_fn):
    """dfc.cond outside a graph: only the branch `pred` chooses runs."""
    return true_fn() if truth(pred, "cond predicate", user_location()) else false_fn()


def while_loop(cond_fn, body_fn, loop_vars, maximum_iterations=None):
    """dfc.while_loop outside a graph: a Python while loop with dfc.while_loop's checks (the body
    keeps the structure of the loop variables, and the dtype of those that are not Python scalars)."""
    loc = user_location()
    single = not isinstance(loop_vars, (tuple, list))
    lv = (loop_vars,) if single else tuple(loop_vars)
    limit = None if maximum_iterations is None else int(value_of(maximum_iterations))
    n = 0
    while (limit is None or n < limit) and truth(cond_fn(*lv), "loop condition", loc):
        out = body_fn(*lv)
        if len(lv) == 1 and not isinstance(out, (tuple, list)):
            out = (out,)
        if isinstance(out, list):
            out = tuple(out)
        if not nest.same_structure(lv, out, expand_composites=True):
            raise DfcTypeError(f"the body of the while_loop returns {_desc(out)} but the loop variables are "
                               f"{_desc(lv)}", loc=loc)
        for k, (old, new) in enumerate(zip(nest.flatten(lv, True), nest.flatten(out, True))):
            if new is None:
                raise DfcTypeError(f"loop variable {k} became None in the loop body", loc=loc)
            old_d, new_d = _dtype(old), _dtype(new)
            if old_d is not None and new_d is not None and old_d != new_d:
                raise DfcTypeError(f"loop variable {k} changes dtype from {old_d} to {new_d} in the loop "
                                   f"body; cast it so every iteration has one dtype", loc=loc)
        lv = out
        n += 1
    return lv[0] if single else lv


def _dtype(v):
    """The dtype of a strongly typed value (None for Python scalars, which take the body's dtype)."""
    v = value_of(v)
    if is_value(v):
        return const_array(v).dtype.name
    return None


def _desc(x):
    return repr(nest.map_structure(lambda v: type(v).__name__, x)) if nest.is_nested(x) else type(x).__name__


# ---------------------------------------------------------------- dfc.function, eagerly


def run_function(fn, args, kwargs, name):
    """Call `fn` (the user's unconverted Python) and give its results as a graph would: the same
    nesting, numpy arrays (0-d for scalars), Python literals typed as graph constants.

    A Python or numpy error in the user's code (an index out of range, shapes that do not
    broadcast: what a graph reports as a DfcError) is re-raised as a DfcRuntimeError naming the
    user's line that is also an instance of the original class (`except IndexError` still works),
    with the original traceback, so a debugger's post-mortem lands on that line. A failed
    `assert` is a DfcAssertionError (and an AssertionError), as the graph's converted assert is."""
    try:
        out = fn(*args, **kwargs)
    except DfcError:
        raise
    except Exception as e:   # noqa: BLE001 — only Python's and numpy's own errors are translated
        err = _translated(e, name)
        if err is None:
            raise
        raise err.with_traceback(e.__traceback__) from None
    return _output(out, name)


_TRANSLATED = (IndexError, ValueError, TypeError, ArithmeticError, AttributeError, KeyError, AssertionError)
_error_classes = {}


def _translated(e, name):
    """A DfcRuntimeError that is also a `type(e)` for a builtin or numpy error raised in user code
    (None for other errors: the user's own exception classes pass through unchanged)."""
    cls = type(e)
    module = cls.__module__.split(".")[0]
    if not isinstance(e, _TRANSLATED) or module not in ("builtins", "numpy"):
        return None
    sub = _error_classes.get(cls)
    base = DfcAssertionError if isinstance(e, AssertionError) else DfcRuntimeError
    if sub is None:
        try:
            sub = type(f"DfcEager{cls.__name__}", (base, cls), {"__str__": BaseException.__str__,
                                                              "__module__": __name__})
        except TypeError:
            sub = base
        _error_classes[cls] = sub
    where = _user_frame(e.__traceback__)
    if base is DfcAssertionError:     # a Python `assert`: the graph's Assert says this
        return sub(f"assertion failed: {e}", loc=where)
    return sub(f"{cls.__name__} in dfc.function {name} (run eagerly): {e}", loc=where)


def _user_frame(tb):
    """'file.py:12' of the innermost frame of the traceback outside dfc and installed libraries."""
    import sysconfig
    skip = {tracing._DFC_DIR} | {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
    where = None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not fn.startswith("<") and not any(fn.startswith(d) for d in skip):
            where = f"{fn}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _output(r, name):
    from dfc.compiler.tensor_array import TensorArray
    if r is None:
        return None
    if isinstance(r, TensorArray):
        return _output(r.stack(), name)
    if isinstance(r, tuple):
        return tuple(_output(x, name) for x in r)
    if isinstance(r, list):
        return [_output(x, name) for x in r]
    if isinstance(r, dict):
        for k in r:
            if not isinstance(k, str):
                raise DfcInputError(f"returned dict keys must be strings, got {k!r}")
        return {k: _output(v, name) for k, v in r.items()}
    if isinstance(r, Tensor) and not isinstance(r, EagerTensor):
        raise DfcError(f"dfc.function {name} (run eagerly) returned symbolic tensor {r.ref} of a graph built "
                       f"inside it")
    if hasattr(r, "_dfc_tensor") and not isinstance(r, Tensor):
        r = r._dfc_tensor()
    return np.array(const_array(value_of(r)))     # a copy the caller owns, as a graph's result is
