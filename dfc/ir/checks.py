"""Checks of a whole graph that go beyond each op's dtype/shape rule (run by Graph.verify).

A graph loaded from a file is untrusted: everything it declares must agree with
what it computes, and every way of running it (the reference executor, fused
loops) must give the same answer. So verification also rejects:

- an output port a node does not have;
- an Enter whose `is_constant` contradicts its use: a loop variable's Enter
  (not constant) reaches only iteration 0, so it may feed only the loop's
  Merge; a constant Enter reaches every iteration, so it must not feed it;
- a NextIteration whose value may be dead while the loop goes on (it comes
  from one branch of a cond) or live after the loop stopped: the next
  iteration would wait forever for it, or start after the loop exited;
- a handle used as a tensor or a tensor used as a handle, and declared
  element/variable types that differ from the ones the resource holds;
- a signature that does not match the graph (inputs that are not the
  Placeholders they name, outputs that are not root-frame tensors).

Every pass here is linear in the size of the graph.
"""
import re

from dfc.errors import DfcGraphError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir import structure
from dfc.ir.graph import ROOT_FRAME, parse_input as _parse     # graph.py imports this module lazily


# ------------------------------------------------------------------ names and strings of a loaded graph
#
# A node name, a loop's frame name and a device are made of NAME_CHARS (device names also of ':'), at most
# MAX_NAME characters: what dfc's own compiler writes (`while_body_1/mul_3`); ':' separates an input's
# port and '^' marks a control input, so neither is part of a name. Other attribute strings (a Variable's
# shared name, a checkpoint path) are data: any text without control characters (newlines, NUL, U+0085,
# U+2028 ...), at most MAX_STRING characters; free text (FREE_TEXT: a Print's template, an Assert's message)
# may hold newlines and tabs. Nothing read from a graph ever
# becomes source code (dfc/runtime/emit.py); these rules keep names printable in messages and tools.
NAME_CHARS = "A-Z a-z 0-9 _ . / -"
NAME_RE = re.compile(r"[A-Za-z0-9_./-]+\Z")
DEVICE_RE = re.compile(r"[A-Za-z0-9_./:-]+\Z")
MAX_NAME, MAX_STRING = 256, 4096
FREE_TEXT = frozenset({("Print", "template"), ("Assert", "message")})


def shown(text, limit=60):
    """text for an error message: escaped (ascii) and cut to about `limit` characters."""
    return ascii(text[:limit]) + (f" (cut from {len(text)} characters)" if len(text) > limit else "")


def label(name):
    """How an error names a node read from a file: its name, escaped and cut unless it is a valid one."""
    return name if NAME_RE.match(name) and len(name) <= MAX_NAME else shown(name)


def check_name(name, what="node name", node=None, device=False):
    """A name read from a graph file must be NAME_CHARS (devices: and ':'), 1 to MAX_NAME characters."""
    ok = (DEVICE_RE if device else NAME_RE).match(name) is not None and len(name) <= MAX_NAME
    if not ok:
        extra = " and ':'" if device else ""
        which = "" if node is None else f" {shown(name)}"      # (the node's own name is in [node ...])
        raise DfcGraphError(f"{what}{which} must be 1 to {MAX_NAME} characters among {NAME_CHARS}{extra}",
                            node=label(node if node is not None else name))


def check_text(text, what, node, free=False):
    """An attribute string read from a graph file: at most MAX_STRING characters, no control characters
    (free text, a print's template or an assert's message, may also hold newlines and tabs)."""
    if len(text) > MAX_STRING or not (text.isprintable() or free and
                                      text.replace("\n", "").replace("\t", "").isprintable()):
        extra = " other than newlines and tabs" if free else " (no newlines)"
        raise DfcGraphError(f"{what} {shown(text)} must be at most {MAX_STRING} printable characters, with no "
                            f"control characters{extra}", node=label(node))


def check_port(src, port, ref, node):
    """`ref` (a data input of `node`) must name an output port that `src` has."""
    n = opreg.get(src.op).num_outputs(src.attrs, len(src.data_inputs))
    if not 0 <= port < n:
        raise DfcGraphError(f"input {ref!r}: {src.op} {src.name!r} has {n} output(s)", node=node)


def check_graph(g, frame_of, parent, consumers, types):
    check_next_iterations(g, frame_of, consumers)
    check_frame_cycles(g, frame_of)
    check_enters(g, consumers)
    check_loop_liveness(g, frame_of, parent)
    check_handles(g, types)
    check_signature(g, g.signature, frame_of, parent, types)


def check_next_iterations(g, frame_of, consumers):
    """A NextIteration passes a value to the next iteration of its own frame: its Merge is in that frame."""
    for n in g.nodes.values():
        if n.op == "NextIteration":
            for u, _ in consumers[n.name]:
                if frame_of[u] != frame_of[n.name]:
                    raise DfcGraphError(f"NextIteration of frame {frame_of[n.name]!r} feeds the Merge {u!r} of "
                                        f"frame {frame_of[u]!r}", node=n.name)


def check_frame_cycles(g, frame_of):
    """Seen from its parent frame, a loop is one node: its Enters are its inputs, its Exits its outputs.
    That graph must be acyclic: a loop cannot start from a value computed from its own result (the
    per-iteration check of topo_order misses a cycle that goes round through a NextIteration)."""
    def frame(name):
        return ("frame", name)

    users, indeg = {}, {}
    for n in g.nodes.values():
        dst = frame(n.attrs["frame_name"]) if n.op == "Enter" else n.name
        indeg.setdefault(dst, 0)
        for ref in n.inputs:
            src = _parse(ref)[0]
            op = g.nodes[src].op
            if op == "NextIteration" and n.op == "Merge":
                continue      # the loop's back edge
            a = frame(frame_of[src]) if op == "Exit" else src
            users.setdefault(a, []).append(dst)
            indeg[dst] = indeg.get(dst, 0) + 1
            indeg.setdefault(a, 0)
    ready = [x for x, d in indeg.items() if d == 0]
    done = 0
    while ready:
        x = ready.pop()
        done += 1
        for u in users.get(x, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if done != len(indeg):
        cycle = _a_cycle({x for x, d in indeg.items() if d > 0}, users)
        frames = [x[1] for x in cycle if isinstance(x, tuple)]
        nodes = [x for x in cycle if isinstance(x, str)]
        raise DfcGraphError(f"loop frame {frames[0]!r} needs, to start, a value computed from its own result "
                            f"(through {', '.join(nodes[:6])})" if frames else f"cycle among {nodes[:8]}",
                            node=nodes[0] if nodes else None)


def _a_cycle(stuck, users):
    """The vertices of one cycle among `stuck` (what Kahn's algorithm could not order)."""
    preds = {}
    for a, us in users.items():
        if a in stuck:
            for u in us:
                if u in stuck:
                    preds.setdefault(u, []).append(a)
    x, seen = min(stuck, key=str), []
    while x not in seen:      # every stuck vertex has a stuck predecessor: walking back must repeat
        seen.append(x)
        x = preds[x][0]
    return seen[seen.index(x):][::-1]


# ------------------------------------------------------------------ Enter


def _is_loop_merge(g, name):
    n = g.nodes[name]
    return n.op == "Merge" and any(g.nodes[_parse(r)[0]].op == "NextIteration" for r in n.inputs)


def check_enters(g, consumers):
    for n in g.nodes.values():
        if n.op != "Enter":
            continue
        users = consumers[n.name]
        if n.attrs["is_constant"]:
            for u, slot in users:
                if _is_loop_merge(g, u):
                    raise DfcGraphError(f"a constant Enter (is_constant=true) reaches every iteration, but it "
                                        f"feeds the loop Merge {u!r}, which takes a value only in the first; "
                                        f"a loop variable's Enter needs is_constant=false", node=n.name)
        else:
            for u, slot in users:
                if slot < 0 or not _is_loop_merge(g, u):
                    raise DfcGraphError(f"a loop variable's Enter (is_constant=false) reaches only the first "
                                        f"iteration, but {u!r} uses it in every one; a value used in every "
                                        f"iteration needs is_constant=true", node=n.name)


# ------------------------------------------------------------------ liveness of loop variables
#
# A guard is the set of conditions under which a value is live, within one iteration of its frame:
# atoms (pred node, pred port, branch) say "that predicate had that value" (Switch outputs add them),
# and ("?", node, None) says "live only under a condition not modelled here". Conditions from an
# enclosing frame are constant during the frame's run and are carried along.


def _or(guards, name):
    """The guard of a Merge of inputs with these guards (it is live when any input is)."""
    gs = set(guards)
    changed = True
    while changed and len(gs) > 1:
        changed = False
        for a in list(gs):
            if any(b < a for b in gs):           # a implies b: a adds nothing to "a or b"
                gs.discard(a)
                changed = True
        for a in list(gs):
            for b in list(gs):
                d = a ^ b
                if len(d) == 2 and _complementary(*d) and a in gs and b in gs:
                    gs -= {a, b}
                    gs.add(a & b)                  # (g and p) or (g and not p) == g
                    changed = True
    if len(gs) == 1:
        return gs.pop()
    if not gs:
        return frozenset({("?", name, None)})
    return frozenset.intersection(*gs) | {("?", name, None)}


def _union(guards):
    if not guards:
        return _NONE
    first = guards[0]
    if all(x is first for x in guards):
        return first
    return frozenset().union(*guards)


_NONE = frozenset()


def _complementary(x, y):
    return x[0] != "?" and x[:2] == y[:2] and x[2] != y[2]


def check_loop_liveness(g, frame_of, parent):
    def out_frame(src):
        f = frame_of[src]
        return parent[f] if g.nodes[src].op == "Exit" else f

    depth = {}

    def frame_depth(f):
        d = depth.get(f)
        if d is None:
            d, p = 0, f
            while p:
                d, p = d + 1, parent[p]
            depth[f] = d
        return d

    def inside(f, frame):
        """f is `frame` or nested in it."""
        while frame_depth(f) > frame_depth(frame):
            f = parent[f]
        return f == frame

    guard, switch_guard, switch_base = {}, {}, {}

    def out_guard(src, port):
        if src in switch_guard:
            return switch_guard[src][port]
        return guard[src]

    loop_conds, transfers = {}, set()
    for n in g.nodes.values():
        if n.op == "LoopCond":
            loop_conds.setdefault(frame_of[n.name], []).append(n.name)
        elif n.op in ("Send", "Recv"):
            transfers.add(frame_of[n.name])     # liveness crosses devices: not visible here
    for n in g.topo_order():
        ins = [_parse(r) for r in n.inputs]
        ins = [(s, p, c) for s, p, c in ins if g.nodes[s].op != "NextIteration"]
        if n.op == "Merge":
            guard[n.name] = _or([out_guard(s, p) for s, p, _ in ins], n.name)
            continue
        # A control edge from a Switch is dead only when both its outputs are.
        base = _union([switch_base[s] if c and s in switch_base else out_guard(s, max(p, 0))
                       for s, p, c in ins])
        if n.op == "Switch":
            switch_base[n.name] = base
            pred, port = _parse(n.inputs[1])[:2]
            switch_guard[n.name] = (base | {(pred, port, 0)}, base | {(pred, port, 1)})
        elif n.op == "Exit":
            frame = frame_of[n.name]
            inner = {a for a in base if inside(out_frame(a[1] if a[0] == "?" else a[0]), frame)}
            lcs = loop_conds.get(frame, [])
            clean = len(lcs) == 1 and inner == {(lcs[0], 0, 0)}
            guard[n.name] = (base - inner) | (frozenset() if clean else {("?", n.name, None)})
        else:
            guard[n.name] = base
    enters = {}
    for n in g.nodes.values():
        if n.op == "Enter":
            enters.setdefault(n.attrs["frame_name"], n.name)
    for f, name in enters.items():
        if f not in transfers and len(loop_conds.get(f, [])) != 1:
            raise DfcGraphError(f"loop frame {f!r} has {len(loop_conds.get(f, []))} LoopCond nodes; a loop has "
                                f"exactly one (its predicate)", node=name)
    for n in g.nodes.values():
        if n.op not in ("NextIteration", "Exit"):
            continue
        frame = frame_of[n.name]
        if frame == ROOT_FRAME:
            raise DfcGraphError(f"{n.op} outside any loop frame", node=n.name)
        if frame in transfers:
            continue     # liveness crosses devices: the tagged-frame rules alone apply
        lc = loop_conds[frame][0]
        src, port, _ = _parse(n.inputs[0])
        inner = {a for a in out_guard(src, port) if inside(out_frame(a[1] if a[0] == "?" else a[0]), frame)}
        if n.op == "Exit" and inner != {(lc, 0, 0)}:
            raise DfcGraphError(f"an Exit passes a loop's result on once, when the loop stops, but its value "
                                f"{src!r} is not the loop Switch's false output (the value when {lc!r} is false)",
                                node=n.name)
        if n.op == "NextIteration" and inner != {(lc, 0, 1)}:
            why = ("it is live even when the loop stops (take it from the loop Switch's true output)"
                   if (lc, 0, 1) not in inner else
                   "it may be dead while the loop goes on (it comes from one branch of a cond: Merge both "
                   "branches)")
            raise DfcGraphError(f"the value passed to the next iteration from {src!r}: {why}", node=n.name)


# ------------------------------------------------------------------ handles


_HANDLE_SLOT = {op: 0 for op in (
    "ReadVariable", "Assign", "AssignAdd", "AssignSub", "ResourceScatterAdd", "ResourceScatterSub", "StackPush",
    "StackPop", "TensorArrayWrite",
    "TensorArrayRead", "TensorArraySize", "TensorArrayStack", "TensorArrayGather", "TensorArrayConcat",
    "TensorArrayUnstack", "TensorArrayScatter", "TensorArrayGrad", "QueueEnqueue", "QueueEnqueueMany",
    "QueueDequeue", "QueueDequeueMany", "QueueSize", "QueueClose", "AccumulatorApplyGradient",
    "AccumulatorTakeGradient", "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep")}
# Ops that pass a value (maybe a handle) from these inputs to their output 0; None: every input.
_PASS = {"Identity": (0,), "StopGradient": (0,), "Enter": (0,), "Exit": (0,), "NextIteration": (0,),
         "Switch": (0,), "Merge": None, "StackPush": (1,)}
_KIND = {"VarHandle": "variable", "StackV2": "stack", "TensorArray": "tensor_array",
         "TensorArrayGrad": "tensor_array", "QueueHandle": "queue", "AccumulatorHandle": "accumulator"}
_WANTS = {"ReadVariable": "variable", "Assign": "variable", "AssignAdd": "variable", "AssignSub": "variable",
          "ResourceScatterAdd": "variable", "ResourceScatterSub": "variable",
          "StackPush": "stack", "StackPop": "stack"}
_WANTS.update({op: "queue" for op in ("QueueEnqueue", "QueueEnqueueMany", "QueueDequeue", "QueueDequeueMany",
                                      "QueueSize", "QueueClose")})
_WANTS.update({op: "accumulator" for op in ("AccumulatorApplyGradient", "AccumulatorTakeGradient",
                                            "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep")})


def check_handles(g, types):
    """Handles go only where handles belong, to a resource of the right kind and declared type."""
    def in_type(ref):
        s, p, _ = _parse(ref)
        return types[s][p]

    users, once = [], []
    for n in g.nodes.values():
        hslot = _HANDLE_SLOT.get(n.op)
        passing = _PASS.get(n.op, ())
        if n.op == "ApplyOnce":
            hslot = _apply_once_handles(n)
            once.append(n)
        for k, ref in enumerate(n.data_inputs):
            is_handle = in_type(ref).dtype == dt.HANDLE
            if k == hslot or (isinstance(hslot, set) and k in hslot):
                if not is_handle:
                    raise DfcTypeError(f"{n.op} input {k} must be a resource handle, got {in_type(ref)!r}",
                                       node=n.name, loc=n.loc)
                users.append(n)
            elif is_handle and not (passing is None or k in passing):
                raise DfcTypeError(f"{n.op} input {k} is a resource handle (of a Variable, stack or "
                                   f"TensorArray), not a tensor", node=n.name, loc=n.loc)
    if not users:
        return
    sources = _handle_sources(g, types)
    for n in once:
        _check_apply_once(g, n, sources, in_type)
    users = [n for n in users if n.op != "ApplyOnce"]
    writes = {}
    for n in users:
        for s in sources.get(_parse(n.inputs[0])[0], ()):
            _check_use(g, n, g.nodes[s], types, in_type, writes)
    for n in users:
        if n.op in ("StackPop", "TensorArrayRead", "TensorArrayStack", "TensorArrayGather",
                    "TensorArrayConcat"):
            want = n.attrs.get("shape") if n.op == "StackPop" else n.attrs.get("element_shape")
            for s in sources.get(_parse(n.inputs[0])[0], ()):
                for shape in writes.get(s, ()):
                    if n.op != "TensorArrayConcat" and not dt.shapes_compatible(want, shape):
                        raise DfcTypeError(f"{n.op} declares elements of shape {dt.format_shape(want)}, but "
                                           f"{s!r} holds elements of shape {dt.format_shape(shape)}",
                                           node=n.name, loc=n.loc)


_SCATTERS = ("ResourceScatterAdd", "ResourceScatterSub")


def _apply_once_handles(n):
    """The inputs of an ApplyOnce that are Variable handles: the record, the updated and the snapshot ones."""
    k = len(n.attrs.get("ops") or ())
    return {0} | set(range(2, 2 + k)) | set(range(2 + 2 * k, 2 + 2 * k + len(n.attrs.get("dtypes") or ())))


def _check_apply_once(g, n, sources, in_type):
    """Each handle of an ApplyOnce is a Variable's, holding what the op assigns to it or declares it reads."""
    k = len(n.attrs["ops"])
    snapshot = iter(n.attrs["dtypes"])
    for slot in sorted(_apply_once_handles(n)):
        if 2 <= slot < 2 + k:
            declared = in_type(n.data_inputs[slot + k])
            if n.attrs["ops"][slot - 2] in _SCATTERS:          # rows of the Variable: the dtype only
                declared = dt.TType(declared.dtype, None)
        elif slot == 0:
            declared = dt.TType("int64", ())
        else:
            declared = dt.TType(next(snapshot), None)
        for name in sources.get(_parse(n.data_inputs[slot])[0], ()):
            src = g.nodes[name]
            held = in_type(src.data_inputs[0]) if _KIND[src.op] == "variable" and src.data_inputs else None
            if _KIND[src.op] != "variable" or (held is not None and (
                    held.dtype != declared.dtype or not dt.shapes_compatible(declared.shape, held.shape))):
                raise DfcTypeError(f"ApplyOnce input {slot} must be the handle of a Variable holding "
                                   f"{declared!r}, but it comes from the {src.op} {src.name!r}"
                                   + (f" holding {held!r}" if held is not None else ""), node=n.name, loc=n.loc)


def _handle_sources(g, types):
    """node name -> set of the resource-making nodes its (handle) output 0 may come from."""
    src = {}
    order = [n for n in g.topo_order() if types[n.name] and types[n.name][0].dtype == dt.HANDLE]
    for _ in range(8):       # a handle carried as a loop variable comes round through a NextIteration
        changed = False
        for n in order:
            if n.op in _KIND:
                new = {n.name}
            elif n.op not in _PASS:
                new = set()      # a handle popped from a stack: its resource is known only at run time
            else:
                new = set()
                slots = _PASS[n.op]
                for k, ref in enumerate(n.data_inputs):
                    if slots is None or k in slots:
                        new |= src.get(_parse(ref)[0], set())
            if new != src.get(n.name):
                src[n.name] = new
                changed = True
        if not changed:
            break
    return src


def _check_use(g, n, s, types, in_type, writes):
    kind = _KIND[s.op]
    want = _WANTS.get(n.op, "tensor_array")
    if kind != want:
        raise DfcTypeError(f"{n.op} needs a {want.replace('_', ' ')} handle, but its handle comes from the "
                           f"{s.op} {s.name!r}", node=n.name, loc=n.loc)

    def mismatch(what, have, declared):
        return DfcTypeError(f"{n.op} {what} {declared!r}, but {s.op} {s.name!r} holds {have!r}",
                            node=n.name, loc=n.loc)

    if kind in ("queue", "accumulator"):
        return      # the kernels check elements against the resource's dtypes and shapes
    if kind == "variable":
        held = in_type(s.data_inputs[0]) if s.data_inputs else None
        if held is None:
            return
        if n.op == "ReadVariable":
            declared = dt.TType(n.attrs["dtype"], n.attrs["shape"])
        elif n.op in ("ResourceScatterAdd", "ResourceScatterSub"):      # rows: compare the dtype only
            declared = dt.TType(in_type(n.data_inputs[2]).dtype, None)
        else:
            declared = in_type(n.data_inputs[1])
        if declared.dtype != held.dtype or not dt.shapes_compatible(declared.shape, held.shape):
            raise mismatch("reads" if n.op == "ReadVariable" else "assigns", held, declared)
    elif kind == "stack":
        held = s.attrs["elem_dtype"]
        declared = n.attrs["elem_dtype"] if n.op == "StackPop" else in_type(n.data_inputs[1]).dtype
        if declared != held:
            raise mismatch("uses elements of", held, declared)
        if n.op == "StackPush":
            writes.setdefault(s.name, []).append(in_type(n.data_inputs[1]).shape)
    else:
        held, es = s.attrs["dtype"], s.attrs["element_shape"]
        value = {"TensorArrayWrite": 2, "TensorArrayUnstack": 1, "TensorArrayScatter": 2}.get(n.op)
        if value is not None:
            t = in_type(n.data_inputs[value])
            shape = t.shape if n.op == "TensorArrayWrite" else (None if t.shape is None else t.shape[1:])
            if n.op != "TensorArrayWrite" and t.shape == ():
                raise DfcTypeError(f"{n.op} needs a value of rank >= 1", node=n.name, loc=n.loc)
            if t.dtype != held:
                raise mismatch("writes", held, t.dtype)
            if not dt.shapes_compatible(es, shape):
                raise mismatch("writes elements of shape", dt.format_shape(es), dt.format_shape(shape))
            writes.setdefault(s.name, []).append(shape)
        elif "dtype" in n.attrs and n.op != "TensorArrayGrad":
            if n.attrs["dtype"] != held:
                raise mismatch("reads elements of", held, n.attrs["dtype"])
            declared = n.attrs["element_shape"]
            if n.op != "TensorArrayConcat" and not dt.shapes_compatible(declared, es):
                raise mismatch("reads elements of shape", dt.format_shape(es), dt.format_shape(declared))


# ------------------------------------------------------------------ signature


def check_signature(g, sig, frame_of, parent, types):
    """The signature must describe this graph: Session.call trusts it."""
    if not isinstance(sig, dict):
        raise DfcGraphError("the signature must be an object")
    if not isinstance(sig.get("name", ""), str):
        raise DfcGraphError(f"the signature name must be a string, got {sig.get('name')!r}"[:200])
    inputs = sig.get("inputs", [])
    if not isinstance(inputs, list):
        raise DfcGraphError("signature 'inputs' must be a list")
    names, nodes = set(), set()
    for inp in inputs:
        _check_input(g, inp, names, nodes)
    targets = sig.get("targets", [])
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise DfcGraphError("signature 'targets' must be a list of node names")
    for t in targets:
        if t not in g.nodes:
            raise DfcGraphError(f"signature target {t!r} names no node")
    for leaf in structure.leaves(sig.get("outputs")):
        _check_output(g, leaf["ref"], frame_of, parent, types)


def _check_input(g, inp, names, nodes):
    if not isinstance(inp, dict) or not isinstance(inp.get("name"), str) or not isinstance(inp.get("node"), str):
        raise DfcGraphError(f"signature input {inp!r} needs a string 'name' and 'node'"[:300])
    name, node = inp["name"], inp["node"]
    if node not in g.nodes:
        raise DfcGraphError(f"signature input {name!r} names no node ({node!r})")
    n = g.nodes[node]
    if n.op != "Placeholder":
        raise DfcGraphError(f"signature input {name!r} is a {n.op}, not a Placeholder", node=node)
    if name in names or node in nodes:
        raise DfcGraphError(f"signature input {name!r} ({node!r}) is listed twice", node=node)
    names.add(name)
    nodes.add(node)
    shape = inp.get("shape")
    if isinstance(shape, tuple):
        shape = list(shape)
    if inp.get("dtype") != n.attrs["dtype"] or shape != n.attrs["shape"]:
        raise DfcGraphError(f"signature input {name!r} declares {inp.get('dtype')!r} shape {shape!r}, but its "
                            f"Placeholder is {n.attrs['dtype']!r} shape {n.attrs['shape']!r}"[:300], node=node)


def _check_output(g, ref, frame_of, parent, types):
    name, port, ctrl = _parse(ref)
    if ctrl or name not in g.nodes:
        raise DfcGraphError(f"signature output {ref!r} names no node"[:200])
    outs = types[name]
    if not 0 <= port < len(outs):
        raise DfcGraphError(f"signature output {ref!r}: {g.nodes[name].op} has {len(outs)} output(s)", node=name)
    f = frame_of[name]
    if g.nodes[name].op == "Exit":
        f = parent[f]
    if f != ROOT_FRAME:
        raise DfcGraphError(f"signature output {ref!r} lives inside a loop frame (fetch a loop's Exit instead)",
                            node=name)
    if outs[port].dtype == dt.HANDLE:
        raise DfcGraphError(f"signature output {ref!r} is a resource handle, not a tensor", node=name)
