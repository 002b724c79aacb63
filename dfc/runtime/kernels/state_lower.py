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
- a Variable: a typed List holding its value (read it, assign it; assigned back once at the end).
An Assert checks its condition; a failed one raises, and the run replays fused, where the kernel raises the
DfcAssertionError with its message and data.
"""
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st


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
        e.stmt(f"S{i}_b = np.empty(16, {st(t.dtype)})")
        e.stmt(f"S{i}_n = 0")
        return ["np.int64(0)"]
    return [f"H.empty_list({t.default()})"]


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
        e.stmt(f"if S{i}_n == S{i}_b.size: S{i}_b = H.grow(S{i}_b)")
        e.stmt(f"S{i}_b[S{i}_n] = {e.args[1]}")
        e.stmt(f"S{i}_n += 1")
        return [e.args[1]]
    e.stmt(f"{e.args[0]}.append({e.args[1]})")
    return [e.args[1]]


@lowering("StackPop")
def _pop(e):
    if e.outs[0].dtype == "resource":
        raise Unsupported("StackPop of a resource handle")
    i = _scalar_stack(e)
    if i is not None:
        v = e.tmp()
        e.stmt(f"if S{i}_n == 0: raise IndexError('pop from an empty stack')")
        e.stmt(f"S{i}_n -= 1")
        e.stmt(f"{v} = S{i}_b[S{i}_n]")
        return [v]
    e.stmt(f"if len({e.args[0]}) == 0: raise IndexError('pop from an empty stack')")
    return [f"{e.args[0]}.pop()"]


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
    proto = t.default() if t.ndim else f"{st(t.dtype)}(0)"
    e.stmt(f"{h} = H.ta_new({proto}, np.int64({e.args[0]}))")
    return [h, "np.float32(0.0)"]


def _local(e):
    return getattr(e.gen, "local_resources", False)


@lowering("TensorArrayStack")
def _ta_stack(e):
    if not _local(e):
        raise Unsupported("TensorArrayStack of a TensorArray made outside the compiled code")
    t = e.outs[0]
    if t.ndim == 1:
        return [f"H.ta_stack_scalars({e.args[0]}[0], {e.args[0]}[1])"]
    return [f"H.ta_stack({e.args[0]}[0], {e.args[0]}[1])"]


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
    k = e.tmp()
    e.stmt(f"for {k} in range({x}.shape[0]):")
    e.stmt(f"    H.ta_write({e.args[0]}[0], {e.args[0]}[1], np.int64({k}), {x}[{k}], {dynamic})")
    return ["np.float32(0.0)"]


@lowering("TensorArrayConcat")
def _ta_concat(e):
    if not _local(e):
        raise Unsupported("TensorArrayConcat of a TensorArray made outside the compiled code")
    return [f"H.ta_concat({e.args[0]}[0], {e.args[0]}[1])"]


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
        e.stmt(f"H.ta_write({h}[0], {h}[1], np.int64({i}), {v}, {dynamic})")
        return ["np.float32(0.0)"]
    g = e.gen
    wid = len(g.ta_writers)
    g.ta_writers.append((e.node.name, tuple(g.frame_chain)))
    for x in [f"np.int64({wid})", f"np.int64({i})"] + [f"it{f}" for f in g.frame_chain]:
        e.stmt(f"{h}[0].append({x})")
    e.stmt(f"{h}[1].append({v})")
    return ["np.float32(0.0)"]          # the flow (state_kernels.FLOW)


def _check_element_shape(e, x, es, first):
    """Statements raising when x's axes from `first` on differ from the TensorArray's element_shape es
    (None: any size)."""
    for k, d in enumerate(es):
        if d is not None:
            e.stmt(f"if {x}.shape[{k + first}] != {d}: raise ValueError('TensorArray element of another shape')")


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
    if _local(e):
        return [f"H.ta_read({h}[0], {h}[1], np.int64({i}))"]
    return [f"H.ta_read({h}[0], {h}[1], np.int64({i}))"]


@lowering("TensorArraySize")
def _ta_size(e):
    if _local(e):
        return [f"np.int64(len({e.args[0]}[0]))"]
    return [f"{e.args[0]}[2]"]


@lowering("ReadVariable")
def _read_var(e):
    return [f"{e.args[0]}[0]"]


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
            new = step(e, "Add" if sign == "+" else "Sub", [f"{h}[0]", v], [t, t], t)
        else:
            new = e.tmp()
            e.stmt(f"{new} = {h}[0] {sign} {v}" if t.ndim else f"{new} = np.{t.dtype}({h}[0] {sign} {v})")
    if t.ndim:
        e.stmt(f"if {new}.shape != {h}[0].shape: raise ValueError('assign of another shape')")
    e.stmt(f"{h}[0] = {new}")
    return [new]


@lowering("Assert")
def _assert(e):
    # a failed assertion raises in compiled code; the fused path then replays the run, and the kernel raises
    # its DfcAssertionError with the message and the data's values, naming the node
    c = e.args[0]
    e.stmt(f"if not {c if e.ins[0].ndim == 0 else f'np.all({c})'}: raise ValueError('assertion failed')")
    return []
