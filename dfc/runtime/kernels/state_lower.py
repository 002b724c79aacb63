"""Lowerings of the stateful ops on resources a loop frame takes from outside (kernels: state_kernels.py):
gradient stacks, TensorArrays and Variables.

numba cannot hold the Python objects themselves (a Stack, a TensorArrayStore with its per-element
gradient sums, a VariableResource in its container with its lock), so compiled code gets a typed stand-in
per handle (dfc/runtime/compiled/codegen.py RESOURCE_USES; dfc/runtime/compiled/__init__.py builds it
before the frame and applies its effects after the compiled code succeeded):
- a stack: a typed List of its elements (push appends, pop takes the last); one made in the compiled
  code (a whole run, compiled/root.py) holding scalars: an array and a count;
- a TensorArray the frame writes: a write log (writer, index, the writer's iteration counters, value),
  written to the store afterwards with the keys the fused path uses, so gradient sums come out the same;
- a TensorArray the frame reads: its elements, which it can read, and its size;
- a TensorArray the frame writes and reads: its elements and which are written, and a write log (its
  writes are made on the elements too, so reads after them in the frame see them);
- a Variable: a typed List holding its value (read it, assign it; assigned back once at the end).
An Assert checks its condition; a failed one raises, and the run replays fused, where the kernel raises the
DfcAssertionError with its message and data.
"""
from dfc.runtime import emit as E
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st


def _flow():
    """The value of a TensorArray op's flow output (state_kernels.FLOW)."""
    return E.fmt("np.float32(0.0)")


def _stack_locals(i):
    """The array and the count of the scalar stack StackV2 node i makes (locals of the compiled function)."""
    return E.ident("S", i, tail="_b"), E.ident("S", i, tail="_n")


@lowering("StackV2")
def _stack_new(e):
    stack_type = getattr(e.gen, "stack_type", None)     # a stack made in the compiled code (compiled/root.py)
    if stack_type is None:
        raise Unsupported("a stack made inside a loop frame")
    i = e.gen.plan.index[e.node.name]
    t = stack_type(i)
    if e.gen.scalar_stack(i) is not None:
        # a stack of scalars: an array and a count, locals of the compiled function that its pushes and pops
        # name directly (a typed List costs a C call and ~5 atomic reference counts a push or pop)
        b, n = _stack_locals(i)
        e.stmt("{} = np.empty(16, {})", b, st(t.dtype))
        e.stmt("{} = 0", n)
        return [E.fmt("np.int64(0)")]
    return [E.fmt("H.empty_list({})", t.default())]


def _scalar_stack(e):
    """The StackV2 node whose scalar stack push or pop e works on (its locals S<node>_b, S<node>_n), or None."""
    of = getattr(e.gen, "scalar_stack", None)
    return None if of is None else of(e.gen.plan.index[e.node.name])


@lowering("StackPush")
def _push(e):
    h, x = e.ins
    if h.dtype != "resource" or x.dtype == "resource":
        raise Unsupported("StackPush of a resource handle")
    i = _scalar_stack(e)
    if i is not None:
        b, n = _stack_locals(i)
        e.stmt("if {} == {}.size: {} = H.grow({})", n, b, b, b)
        e.stmt("{}[{}] = {}", b, n, e.args[1])
        e.stmt("{} += 1", n)
        return [e.args[1]]
    e.stmt("{}.append({})", e.args[0], e.args[1])
    return [e.args[1]]


@lowering("StackPop")
def _pop(e):
    if e.outs[0].dtype == "resource":
        raise Unsupported("StackPop of a resource handle")
    i = _scalar_stack(e)
    if i is not None:
        v = e.tmp()
        b, n = _stack_locals(i)
        e.stmt("if {} == 0: raise IndexError('pop from an empty stack')", n)
        e.stmt("{} -= 1", n)
        e.stmt("{} = {}[{}]", v, b, n)
        return [v]
    e.stmt("if len({}) == 0: raise IndexError('pop from an empty stack')", e.args[0])
    return [E.fmt("{}.pop()", e.args[0])]


@lowering("TensorArray")
def _ta_new(e):
    ta_type = getattr(e.gen, "ta_type", None)      # a TensorArray made in the compiled code (compiled/root.py)
    at = e.node.attrs
    if ta_type is None:
        raise Unsupported("a TensorArray made inside a loop frame")
    if at.get("accumulate", False):
        raise Unsupported("an accumulating (gradient) TensorArray made in compiled code")
    t = ta_type(e.gen.plan.index[e.node.name])
    if str(at["dtype"]) != t.dtype:
        raise Unsupported("a TensorArray whose values are of another dtype")
    h = e.tmp()
    proto = t.default() if t.ndim else E.fmt("{}(0)", st(t.dtype))
    e.stmt("{} = H.ta_new({}, np.int64({}))", h, proto, e.args[0])
    return [h, _flow()]


def _local(e):
    return getattr(e.gen, "local_resources", False)


def _use(e):
    """How the frame uses the resource handle e's node takes (codegen.RESOURCE_USES), or None."""
    return getattr(e.gen, "handle_use", {}).get(e.index)


def _elements(e, what):
    """Refuses a TensorArray e cannot hold the elements of (one made outside the compiled code that the
    frame does not read)."""
    if not _local(e) and _use(e) not in ("ta_read", "ta_rw"):
        raise Unsupported(f"{what} of a TensorArray made outside the compiled code")


@lowering("TensorArrayStack")
def _ta_stack(e):
    _elements(e, "TensorArrayStack")
    t = e.outs[0]
    h = e.args[0]
    return [E.fmt("H.ta_stack_scalars({}[0], {}[1])" if t.ndim == 1 else "H.ta_stack({}[0], {}[1])", h, h)]


@lowering("TensorArrayUnstack")
def _ta_unstack(e):
    if not _local(e):
        raise Unsupported("TensorArrayUnstack of a TensorArray made outside the compiled code")
    dynamic, es = _ta_attrs(e, 0)
    x, t = e.args[1], e.ins[1]
    if es is not None:
        if len(es) != t.ndim - 1:
            raise Unsupported("a TensorArray unstacked from a value of another rank than its elements")
        _check_element_shape(e, x, es, 1)
    k, h = e.tmp(), e.args[0]
    e.stmt("for {} in range({}.shape[0]):", k, x)
    e.stmt("    H.ta_write({}[0], {}[1], np.int64({}), {}[{}], {})", h, h, k, x, k, E.lit(dynamic))
    return [_flow()]


@lowering("TensorArrayGather")
def _ta_gather(e):
    _elements(e, "TensorArrayGather")
    if e.ins[1].ndim != 1:
        raise Unsupported("TensorArrayGather at indices that are not a 1-D tensor")
    h = e.args[0]
    return [E.fmt("H.ta_gather({}[0], {}[1], {})", h, h, e.args[1])]


@lowering("TensorArrayScatter")
def _ta_scatter(e):
    if not _local(e):
        raise Unsupported("TensorArrayScatter to a TensorArray made outside the compiled code (its writes' "
                          "keys are positions, which the write log does not carry)")
    dynamic, es = _ta_attrs(e, 0)
    (h, idx, x), t = e.args[:3], e.ins[2]
    if e.ins[1].ndim != 1 or t.ndim == 0:
        raise Unsupported("TensorArrayScatter other than of rows at a 1-D tensor of indices")
    if es is not None:
        if len(es) != t.ndim - 1:
            raise Unsupported("a TensorArray scattered a value of another rank than its elements")
        _check_element_shape(e, x, es, 1)
    k = e.tmp()
    e.stmt("if {}.size != {}.shape[0]: raise ValueError('TensorArrayScatter: indices and values differ')", idx, x)
    e.stmt("for {} in range({}.size):", k, idx)
    e.stmt("    H.ta_write({}[0], {}[1], np.int64({}[{}]), {}[{}], {})", h, h, idx, k, x, k, E.lit(dynamic))
    return [_flow()]


@lowering("TensorArrayConcat")
def _ta_concat(e):
    _elements(e, "TensorArrayConcat")
    return [E.fmt("H.ta_concat({}[0], {}[1])", e.args[0], e.args[0])]


@lowering("TensorArrayWrite")
def _ta_write(e):
    h, i, v = e.args[:3]
    if e.ins[1].ndim != 0:
        raise Unsupported("a TensorArray index that is not one integer")
    if _local(e):
        dynamic, es = _ta_attrs(e, 0)
        t = e.ins[2]
        if es is not None:
            if len(es) != t.ndim:
                raise Unsupported("a TensorArray written a value of another rank than its elements")
            _check_element_shape(e, v, es, 0)
        e.stmt("H.ta_write({}[0], {}[1], np.int64({}), {}, {})", h, h, i, v, E.lit(dynamic))
        return [_flow()]
    g = e.gen
    log = (E.fmt("{}[0]", h), E.fmt("{}[1]", h))
    if _use(e) == "ta_rw":      # also written on the elements, which later reads in the frame see
        dynamic, _ = _ta_attrs(e, 0)
        e.stmt("H.ta_write({}[0], {}[1], np.int64({}), {}, {})", h, h, i, v, E.lit(dynamic))
        log = (E.fmt("{}[2]", h), E.fmt("{}[3]", h))
    wid = len(g.ta_writers)
    g.ta_writers.append((e.node.name, tuple(g.frame_chain)))     # (data for resources.py, not source)
    for x in [E.fmt("np.int64({})", E.lit(wid)), E.fmt("np.int64({})", i)] + [E.ident("it", f) for f in g.frame_chain]:
        e.stmt("{}.append({})", log[0], x)
    e.stmt("{}.append({})", log[1], v)
    return [_flow()]


def _check_element_shape(e, x, es, first):
    """Statements raising when x's axes from `first` on differ from the TensorArray's element_shape es
    (None: any size)."""
    for k, d in enumerate(es):
        if d is not None:
            e.stmt("if {}.shape[{}] != {}: raise ValueError('TensorArray element of another shape')", x,
                   E.lit(k + first), E.lit(d))


def _ta_attrs(e, k):
    """(dynamic_size, element_shape) of the TensorArray node whose handle input k of e's node takes."""
    p = e.gen.plan
    src = p.index[e.node.name]
    while True:
        s = p.ins[src][k][0]
        if p.nodes[s].op == "TensorArray":
            at = p.nodes[s].attrs
            es = at.get("element_shape")
            return bool(at.get("dynamic_size", True)), None if es is None else tuple(es)
        src, k = s, 0       # through Enters and Switches


@lowering("TensorArrayRead")
def _ta_read(e):
    h, i = e.args[:2]
    if e.ins[1].ndim != 0:
        raise Unsupported("a TensorArray index that is not one integer")
    return [E.fmt("H.ta_read({}[0], {}[1], np.int64({}))", h, h, i)]


@lowering("TensorArraySize")
def _ta_size(e):
    return [E.fmt("np.int64(len({}[0]))" if _local(e) or _use(e) == "ta_rw" else "{}[2]", e.args[0])]


@lowering("ReadVariable")
def _read_var(e):
    return [E.fmt("{}[0]", e.args[0])]


@lowering("Assign", "AssignAdd", "AssignSub")
def _assign(e):
    h, v = e.args
    t, out = e.ins[1], e.outs[0]
    if (t.dtype, t.ndim) != (out.dtype, out.ndim) or t.dtype == "bool" and e.node.op != "Assign":
        raise Unsupported("an assign that changes the value's type")
    if e.node.op == "Assign":
        new = v
    else:
        sign = "+" if e.node.op == "AssignAdd" else "-"
        if t.dtype in ("int32", "int64"):      # wrapped as numpy wraps it (math_lower's Add and Sub)
            from dfc.runtime.kernels.math_lower import step
            new = step(e, "Add" if sign == "+" else "Sub", [E.fmt("{}[0]", h), v], [t, t], t)
        elif t.ndim:
            new = e.tmp()
            e.stmt("{} = {}[0] + {}" if sign == "+" else "{} = {}[0] - {}", new, h, v)
        else:
            new = e.tmp()
            e.stmt("{} = {}({}[0] + {})" if sign == "+" else "{} = {}({}[0] - {})", new, st(t.dtype), h, v)
    if t.ndim:
        e.stmt("if {}.shape != {}[0].shape: raise ValueError('assign of another shape')", new, h)
    e.stmt("{}[0] = {}", h, new)
    return [new]


@lowering("Assert")
def _assert(e):
    # a failed assertion raises in compiled code; the fused path then replays the run, and the kernel raises
    # its DfcAssertionError with the message and the data's values, naming the node
    c = e.args[0]
    e.stmt("if not {}: raise ValueError('assertion failed')", c if e.ins[0].ndim == 0 else E.fmt("np.all({})", c))
    return []


@lowering("Timestamp")
def _timestamp(e):
    # the clock, read by the kernel (object mode)
    out = e.tmp()
    e.kernel_call([out], e.args)
    return [out]
