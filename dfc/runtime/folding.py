"""Constant folding: a pure op whose inputs are all constants computes the same value on every run.

A gradient graph is full of them: the seed's Fill, the ExpandDims and BroadcastTo of a scalar to a
reduction's input shape, the `4.0 - 1.0` of a power's gradient. Inside a loop they run every iteration
(HMC's leapfrog step computed six such values per step). `fold` gives a copy of the graph in which each is
a Const holding the value its own kernel computed once, so every execution path reads the same bits. The
new Const keeps the node's name, device and source line, its control inputs, and a control input on each
of its former inputs, so it lives in the same frame and is dead where they are.

Not folded: stateful ops (random draws, resources, prints), the five primitives and other executor ops,
ops with several outputs, fed and fetched nodes (a fetch gets a fresh array, not the shared constant), a
value of more than MAX_ELEMENTS elements (it would be held for the session's life), and anything whose
kernel fails (that error belongs to the run, which reports it with the node's name). An op whose output can
outgrow its inputs (Fill, Pad, Range, OneHot, Einsum, ...) is not even run when it would allocate more than
MAX_BYTES (limits.request_bytes, before allocating): folding never builds a large value only to drop it, so a
graph of constants is checked by the run, under the session's memory limit, before anything is allocated.
With a memory limit, the kernels folding runs are checked against it too, and the values kept are counted.

Sessions fold the graph of a single-device fused run (the default); the unfused paths and the reference
interpreter run the graph as written, so the test matrix compares the two. $DFC_FOLD_CONSTANTS=0 turns it
off.
"""

import numpy as np

from dfc import config
from dfc.ir import ops as opreg
from dfc.ir.graph import Graph, Node, parse_input

MAX_ELEMENTS = 1 << 16
MAX_BYTES = MAX_ELEMENTS * 16      # what folding may allocate for one node (a kept value, with temporaries)
ENABLED = config.env("DFC_FOLD_CONSTANTS")


def fold(graph, keep=(), memory_limit=None):
    """(graph with its constant subexpressions folded, number of nodes folded); graph itself when none is.
    keep: names of nodes that must stay as they are (feeds, fetches, targets); memory_limit: the session's
    dfc.runtime.limits.MemoryLimit (or None), which the folding kernels are checked against."""
    from dfc.runtime.kernels import kernel_for
    from dfc.runtime.limits import request_bytes
    keep = set(keep)
    values, folded = {}, {}
    for n in graph.topo_order():
        if n.name in keep:
            continue
        if n.op == "Const":
            values[n.name] = np.asarray(n.attrs["value"])
            continue
        opdef = opreg.get(n.op)
        data = n.data_inputs
        if not data or opdef.stateful or opdef.in_executor or opdef.async_kernel or opdef.kind != "normal":
            continue
        srcs = [parse_input(r) for r in data]
        if any(port != 0 or src not in values for src, port, _ in srcs):
            continue
        try:
            if opdef.num_outputs(n.attrs, len(data)) != 1:
                continue
            inputs = [values[src] for src, _, _ in srcs]
            if request_bytes(n, inputs) > MAX_BYTES:
                continue
            with np.errstate(all="ignore"):
                out = kernel_for(n, np, memory_limit)(None, inputs)
        except Exception:   # noqa: BLE001 — the run raises it, naming the node
            continue
        v = out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else None
        if not isinstance(v, (np.ndarray, np.generic)) or v.dtype == object or v.size > MAX_ELEMENTS:
            continue
        values[n.name] = np.asarray(v)
        folded[n.name] = values[n.name]
    if not folded:
        return graph, 0
    out = Graph(graph.signature.get("name", "graph"))
    out.signature, out.from_file = graph.signature, graph.from_file
    for n in graph.nodes.values():
        if n.name in folded:
            ctrl = list(dict.fromkeys([r for r in n.inputs if r.startswith("^")] +
                                      ["^" + parse_input(r)[0] for r in n.data_inputs]))
            v = folded[n.name]
            n = Node(n.name, "Const", ctrl, {"value": v, "dtype": v.dtype.name}, n.device, n.loc, n.var)
        out.add_node(n)
    return out, len(folded)
