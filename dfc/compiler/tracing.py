"""Graph builder and symbolic tensors.

`trace(fn, args)` calls `fn` with symbolic Tensors in place of TensorSpec
arguments; every dfc op called on them adds a node to the graph being built.
Control-flow contexts (dfc.compiler.control_flow) decide how a tensor from
outside a branch or loop body is captured (one Switch / one Enter each).
"""
import contextlib
import inspect
import os
import re
import sys
import threading

import numpy as np

from dfc import config, nest
from dfc.errors import DfcError, DfcTypeError, DfcInputError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.graph import Graph, Node

_DFC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# generated filename -> {generated line: (original file, original line)}; filled by autograph.
SOURCE_MAPS = {}
_local = threading.local()

# Ops whose order is the program order (automatic control dependencies).
EFFECT_OPS = frozenset({"Print", "Assert", "Assign", "AssignAdd", "AssignSub", "ResourceScatterAdd",
                        "ResourceScatterSub", "ApplyOnce", "ReadVariable", "Save",
                        "Restore", "Progress", "SummaryScalar", "SummaryHistogram", "Timestamp",
                        # queues and accumulators (dfc/compiler/queues.py)
                        "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue", "QueueDequeueMany", "QueueSize",
                        "QueueClose", "AccumulatorApplyGradient", "AccumulatorTakeGradient",
                        "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep"})


def user_location(skip_dfc=True):
    """'file.py:12' of the innermost frame of user code (generated code mapped back)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        smap = SOURCE_MAPS.get(fn)
        if smap is not None:
            orig = smap.get(f.f_lineno)
            if orig is not None:
                return f"{orig[0]}:{orig[1]}"
        elif not (skip_dfc and fn.startswith(_DFC_DIR)) and not fn.startswith("<"):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


class TensorSpec:
    """The dtype and shape of a graph input (None dims accept any size)."""

    def __init__(self, shape=None, dtype="float32", name=None):
        self.shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self.dtype = dt.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_value(cls, v, name=None):
        a = np.asarray(v)
        return cls(a.shape, a.dtype.name, name)

    def __eq__(self, o):
        return isinstance(o, TensorSpec) and (self.shape, self.dtype, self.name) == (o.shape, o.dtype, o.name)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self):
        return f"TensorSpec({list(self.shape) if self.shape is not None else None}, {self.dtype!r})"


class LoopSite:
    """A dfc.while_loop call's place in the trace: the n-th loop built while tracing the body
    of the loop around it (or at the top level), and the types its retraces settled to.

    A loop is traced again when a weakly typed variable settles (`s = 0`, then `s += x` with a
    float x); the loops in its body are then built again at the same places. Remembering what
    they settled to lets each of them start from the settled types, so nested loops retrace
    once per level instead of once per retrace of every loop around them.
    """

    def __init__(self):
        self.children = {}      # index in trace order -> LoopSite
        self.next_child = 0
        self.settled = {}       # key of the starting types -> (settled types, captured types)

    def child(self):
        """The site of the next loop built in this one's body."""
        site = self.children.setdefault(self.next_child, LoopSite())
        self.next_child += 1
        return site


class Mark:
    """What Builder.rollback restores: the builder as it was when Builder.mark was called."""

    __slots__ = ("num_nodes", "last_effect", "effect_count", "conds", "loops", "loop_site", "next_child")

    def __init__(self, b):
        self.num_nodes = b.graph.num_nodes()
        self.last_effect, self.effect_count = dict(b.last_effect), b.effect_count
        self.conds, self.loops = dict(b.conds), dict(b.loops)
        self.loop_site, self.next_child = b.loop_site, b.loop_site.next_child


class Builder:
    """Builds one Graph: unique names, current control context, device scope, effect order,
    the conds and loops built so far, and rollback to a mark."""

    def __init__(self, name="graph"):
        self.graph = Graph(name)
        self.ctx = None
        self.devices = []
        self.counters = {}
        self.last_effect = {}     # control context -> name of its last side-effect node
        self.effect_count = 0
        self.conds = {}           # Merge node name -> CondState of the cond it is an output of
        self.loops = {}           # frame name -> WhileContext (forward and gradient loops)
        self.lifted = {}          # Merge lifting a cond-branch value for a gradient stack -> that value's ref
        self.loop_site = LoopSite()   # the while_loop whose body is being traced (root: top level)
        self.control_scopes = []  # open `with dfc.control_dependencies(...)` blocks (control_deps.py)
        self.control_tokens = {}  # (node, context, pivot) -> the node that carries its control edge there
        self.variables = {}
        self.tensors = {}         # node name -> its output Tensors (with their contexts); read by autodiff
        self.maybe_unset = {}     # id(tensor) -> (tensor, its "is set" flag); see autograph/unset.py
        # While a custom gradient function runs: fn(t) -> t made usable where it is captured from a context
        # that does not enclose it (a forward tensor seen from the gradient loop; autodiff/custom_gradient.py)
        self.map_foreign = None

    def mark(self):
        """A point to roll back to when a first attempt at a cond or loop must be redone."""
        return Mark(self)

    def rollback(self, mark):
        """Drop every node built since `mark` and the effects, conds and loops they made.

        Node names are not reused: a Tensor of a dropped node never names a new node.
        """
        for name in list(self.graph.nodes)[mark.num_nodes:]:
            self.tensors.pop(name, None)
        self.graph.remove_nodes_after(mark.num_nodes)
        self.last_effect, self.effect_count = dict(mark.last_effect), mark.effect_count
        self.conds, self.loops = dict(mark.conds), dict(mark.loops)
        self.loop_site = mark.loop_site
        self.loop_site.next_child = mark.next_child

    @contextlib.contextmanager
    def tracing_loop(self, site):
        """Trace a loop's body at `site`: the loops built in it are its children."""
        outer, self.loop_site = self.loop_site, site
        site.next_child = 0
        try:
            yield
        finally:
            self.loop_site = outer

    def unique(self, base):
        # a saved graph's names must load: characters outside dfc.ir.checks.NAME_RE become "_"
        base = re.sub(r"[^A-Za-z0-9_./-]", "_", base)[:200] or "node"
        n = self.counters.get(base, 0)
        while True:
            name = base if n == 0 else f"{base}_{n}"
            n += 1
            if name not in self.graph.nodes:
                self.counters[base] = n
                return name

    def make(self, op, inputs=(), attrs=None, name=None, control=(), ctx="current", out_ctx="same",
             raw=False, ordered=True):
        """Add a node; capture its inputs into the current context; return its output Tensors.

        ctx: the control context the node is built in (default: the current one);
        out_ctx: the context its outputs belong to (differs for Enter/Exit/Switch);
        ordered: False keeps a side-effect op (an Assert) out of program order, so it runs
        only when a node that depends on it runs.
        """
        ctx = self.ctx if ctx == "current" else ctx
        out_ctx = ctx if out_ctx == "same" else out_ctx
        opdef = opreg.get(op)
        loc = user_location()
        ins = []
        for t in inputs:
            t = convert(t)
            if t.builder is not self:
                raise DfcError("a tensor from another graph was used", loc=loc)
            ins.append(t if raw else capture(t, ctx, self, loc))
        try:
            attrs = opreg.canonical_attrs(op, attrs or {})
            opdef.check_arity(len(ins))
            types = opdef.infer(attrs, [t.ttype for t in ins])
        except DfcError as e:
            raise type(e)(e.message, loc=loc) from None
        refs = [t.ref for t in ins]
        ctrl = [c for c in control]
        if ctx is not None and not ins and not ctrl:
            ctrl.append(ctx.pivot_name())
        if self.control_scopes and opdef.kind == "normal":
            from dfc.compiler.control_deps import control_inputs_for
            ctrl += control_inputs_for(self, ctx)
        ordered = ordered and op in EFFECT_OPS
        if ordered:
            prev = self.last_effect.get(ctx)
            if prev is None and ctx is not None:
                prev = ctx.effect_entry()
            if prev is not None:
                ctrl.append(prev)
        refs += ["^" + c for c in dict.fromkeys(ctrl)]
        node = Node(name or self.unique(op.lower() if name is None else name), op, refs, attrs,
                    self.devices[-1] if self.devices else None, loc)
        self.graph.add_node(node)
        if ordered:
            self.last_effect[ctx] = node.name
            self.effect_count += 1
        outs = [Tensor(self, node.name, i, tt, out_ctx) for i, tt in enumerate(types)]
        self.tensors[node.name] = outs
        return outs

    def make1(self, op, inputs=(), attrs=None, **kw):
        return self.make(op, inputs, attrs, **kw)[0]


def capture(t, ctx, builder, loc=None):
    """Route tensor t into context ctx (through one Switch/Enter per context crossed)."""
    if t.ctx is ctx:
        return t
    chain, c = [], ctx
    while c is not None and c is not t.ctx:
        chain.append(c)
        c = c.outer
    if c is not t.ctx and builder.map_foreign is not None:
        return capture(builder.map_foreign(t), ctx, builder, loc)
    if c is not t.ctx:
        where = t.ctx.describe() if t.ctx is not None else "the top level"
        raise DfcError(f"tensor {t.ref} was created inside {where} and cannot be used outside it "
                       f"(return it from the branch or loop body instead)", loc=loc)
    for c in reversed(chain):
        t = c.capture(t)
    return t


def current_builder(required=True):
    """The Builder of the graph being built; when none is: the eager builder (ops compute at once on
    numpy, dfc/compiler/eager.py), or None if not `required`."""
    stack = getattr(_local, "stack", None)
    if not stack:
        if required:
            from dfc.compiler.eager import BUILDER
            return BUILDER
        return None
    return stack[-1]


class building:
    """Context manager that makes `builder` the current one."""

    def __init__(self, builder):
        self.builder = builder

    def __enter__(self):
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self.builder)
        return self.builder

    def __exit__(self, *exc):
        _local.stack.pop()


class Tensor:
    """A symbolic tensor: output `port` of node `node` in the graph being built."""

    __slots__ = ("builder", "node", "port", "ttype", "ctx", "weak")
    __array_priority__ = 1000

    def __init__(self, builder, node, port, ttype, ctx, weak=False):
        self.builder, self.node, self.port, self.ttype, self.ctx = builder, node, port, ttype, ctx
        # Weakly typed: holds a value that started as a Python scalar (a loop counter `i = 0`);
        # like a Python scalar it takes the dtype of the strongly typed tensor it meets.
        self.weak = weak

    @property
    def ref(self):
        return f"{self.node}:{self.port}"

    name = ref

    @property
    def dtype(self):
        return self.ttype.dtype

    @property
    def shape(self):
        return self.ttype.shape

    @property
    def ndim(self):
        return self.ttype.rank

    def __repr__(self):
        return f"<dfc.Tensor {self.ref} {self.ttype!r}>"

    def __str__(self):
        raise DfcTypeError(
            f"str() or an f-string of symbolic tensor {self.ref}: its value is known only when the "
            f"graph runs, so the text would be a placeholder, not the value. Print it when the graph "
            f"runs with print('...', t) or dfc.print('...', t) (in a dfc.function, print(f'...{{t}}') "
            f"works too); repr(t) gives the symbolic description", loc=user_location())

    def __format__(self, spec):
        return self.__str__()

    def __bool__(self):
        if _in_converted_code():
            raise DfcTypeError(
                f"the truth value of symbolic tensor {self.ref} is needed here, but it is known only "
                f"when the graph runs. dfc.function converts `if`, `while`, `and`, `or`, `not` and "
                f"`x if c else y` on tensors, but not this use (a comparison inside a library call, "
                f"`x in list`, ...): use dfc.where, dfc.cond, dfc.reduce_any / dfc.reduce_all",
                loc=user_location())
        raise DfcTypeError(f"the truth value of symbolic tensor {self.ref} is not known while tracing: use "
                           f"dfc.function (which converts `if`/`while` on tensors) or dfc.cond / dfc.while_loop",
                           loc=user_location())

    def __setitem__(self, index, value):
        raise DfcTypeError(
            f"symbolic tensor {self.ref} does not support item assignment (t[i] = v): tensors are "
            f"immutable: use dfc.where / a TensorArray. Build a new tensor instead, e.g. "
            f"t = dfc.where(dfc.range(n) == i, v, t) for one element, or collect the values in a "
            f"list / dfc.TensorArray and dfc.stack them",
            loc=user_location())

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise DfcAttributeError(
            f"symbolic tensor {self.ref} has no attribute {name!r}; dfc tensors have .shape, .dtype, "
            f".ndim, .T, .astype, .reshape and the numpy reductions (.sum, .mean, .max, .min, .prod, "
            f".any, .all, .argmax, .argmin); for other operations use the dfc functions "
            f"(dfc.{name}(t) if it exists)", loc=user_location())

    def __index__(self):
        raise DfcTypeError(f"symbolic tensor {self.ref} cannot be used as a Python integer while tracing "
                           f"(a list index, a range() bound or a shape); its value is known only when the "
                           f"graph runs. To index a Python list with a tensor, stack it: dfc.stack(xs)[i]; a "
                           f"numpy array: dfc.gather(arr, i); use dfc.range for a tensor loop",
                           loc=user_location())

    def __len__(self):
        if self.shape is None or not self.shape or self.shape[0] is None:
            raise DfcTypeError(f"len() of tensor {self.ref} with unknown first dimension: use dfc.shape(t)[0]",
                               loc=user_location())
        return self.shape[0]

    def __iter__(self):
        n = len(self)
        return (self[i] for i in range(n))

    def __hash__(self):
        return id(self)

    # operators are attached by dfc.compiler.ops_api


class DfcAttributeError(DfcTypeError, AttributeError):
    """A missing attribute of a symbolic tensor (still an AttributeError for hasattr)."""


def _in_converted_code():
    """True if generated (dfc.function) code is on the stack."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename in SOURCE_MAPS:
            return True
        f = f.f_back
    return False


def convert(x, dtype=None, name=None):
    """A Tensor for x: Tensors pass through (cast if dtype given); Python/numpy values become Const.
    Outside a graph: an EagerTensor holding the value (dfc/compiler/eager.py)."""
    stack = getattr(_local, "stack", None)
    if not stack:
        from dfc.compiler.eager import constant
        return constant(x, dtype)
    if isinstance(x, Tensor):
        if dtype is not None and dt.as_dtype(dtype) != x.dtype:
            from dfc.compiler.ops_api import cast
            return cast(x, dtype)
        return x
    if hasattr(x, "_dfc_tensor"):
        return x._dfc_tensor()
    b = current_builder()
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tensor) for v in nest.flatten(x)):
        from dfc.compiler.ops_api import stack
        return stack([convert(v, dtype) for v in x])
    return b.make1("Const", (), {"value": const_array(x, dtype)}, name=b.unique(name or "const"))


def const_array(x, dtype=None):
    if dtype is not None:
        dtype = dt.as_dtype(dtype)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and np.dtype(dtype).kind in "iub" and x.size:
            raise DfcTypeError(f"cannot use float data as {dtype}")
        return np.asarray(x, dtype=dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        pass
    elif isinstance(x, bool):
        return np.asarray(x)
    elif isinstance(x, int):
        return np.asarray(x, np.int64)
    elif isinstance(x, float):
        return np.asarray(x, config.default_float())
    try:
        a = np.asarray(x)
    except Exception as e:   # noqa: BLE001
        raise DfcTypeError(f"cannot convert {type(x).__name__} to a tensor: {e}") from None
    if a.dtype.kind == "f" and a.dtype.name not in dt.ALL:
        a = a.astype(np.float32)
    elif a.dtype == np.float64 and not isinstance(x, np.ndarray) and not isinstance(x, np.generic):
        a = a.astype(config.default_float())     # Python floats in a list: weak float -> the default float
    elif a.dtype.kind in "iu" and a.dtype.name not in dt.ALL:
        a = a.astype(np.int64)
    if a.dtype.name not in dt.ALL:
        raise DfcTypeError(f"cannot convert {type(x).__name__} of dtype {a.dtype} to a tensor")
    return a


def is_weak(x):
    """Python scalars are weakly typed: they take the dtype of what they meet."""
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def trace(fn, args=(), kwargs=None, name=None):
    """Build a Graph by calling fn with symbolic placeholders for TensorSpec arguments."""
    kwargs = dict(kwargs or {})
    gname = name or getattr(fn, "__name__", "graph")
    b = Builder(gname)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    with building(b):
        inputs = []

        def placeholder(spec, pname):
            node = b.unique(pname)
            t = b.make1("Placeholder", (), {"dtype": spec.dtype,
                                             "shape": None if spec.shape is None else list(spec.shape)},
                        name=node)
            b.graph.nodes[node].loc = None     # the caller of trace is not the input's location
            inputs.append({"name": pname, "node": node, "dtype": spec.dtype,
                           "shape": None if spec.shape is None else list(spec.shape)})
            return t

        call_args = []
        for k, a in enumerate(args):
            pname = _param_name(params, k)
            call_args.append(_specs_to_tensors(a, pname, placeholder))
        call_kwargs = {k: _specs_to_tensors(v, k, placeholder) for k, v in kwargs.items()}
        result = fn(*call_args, **call_kwargs)
        finish(b, result, inputs)
    return b.graph


def _param_name(params, k):
    if k < len(params) and params[k].kind in (params[k].POSITIONAL_ONLY, params[k].POSITIONAL_OR_KEYWORD):
        return params[k].name
    return f"arg{k}"      # a *args entry (or a callable whose signature is unknown)


def _specs_to_tensors(a, pname, placeholder):
    if isinstance(a, TensorSpec):
        return placeholder(a, a.name or pname)
    if isinstance(a, (tuple, list, dict)) and any(isinstance(x, TensorSpec) for x in nest.flatten(a)):
        flat = nest.flatten(a)
        out = [placeholder(x, x.name or f"{pname}_{i}") if isinstance(x, TensorSpec) else x
               for i, x in enumerate(flat)]
        return nest.pack_sequence_as(a, out)
    return a


def finish(b, result, inputs):
    """Record the signature: inputs, output structure (Python values become constants), targets."""
    b.graph.signature["inputs"] = inputs
    b.graph.signature["outputs"] = _structure(b, result)
    last = b.last_effect.get(None)
    b.graph.signature["targets"] = [last] if last else []
    b.graph.verify()


def _structure(b, r):
    if r is None:
        return {"none": True}
    if isinstance(r, tuple):
        return {"tuple": [_structure(b, x) for x in r]}
    if isinstance(r, list):
        return {"list": [_structure(b, x) for x in r]}
    if isinstance(r, dict):
        for k in r:
            if not isinstance(k, str):
                raise DfcInputError(f"returned dict keys must be strings, got {k!r}")
        return {"dict": [[k, _structure(b, v)] for k, v in r.items()]}
    t = convert(r)
    if t.ctx is not None:
        raise DfcError(f"returned tensor {t.ref} was created inside {t.ctx.describe()}")
    return {"ref": t.ref}

from dfc.compiler import ops_api as _ops_api  # noqa: E402,F401  (attaches Tensor operators)
