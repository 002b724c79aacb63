"""Common subexpression elimination (whitepaper §5.1): identical pure nodes run once.

Two nodes are identical when they have the same op, the same data inputs (after merging, in order), the same
control inputs (as a set), equal attributes (arrays compared bit for bit) and the same device. Identical
inputs imply the same frame, iteration and deadness: a pure node with no data input inside a loop or branch
carries a control input from that context's pivot, and the Enter, Switch and Merge nodes that route values
into and out of loops and branches are never merged, so nodes of two loops or two branches of a cond never
have the same inputs. `eliminate` gives a copy of the graph in which every such node but the first (in
topological order) is gone and its consumers read the first one instead.

Never merged: stateful ops (random draws, resources, prints, queues), the control-flow primitives and
LoopCond, Send/Recv, Placeholders and fed nodes (their value comes from outside); fetched nodes and targets
stay (a fetch keeps its own node name) though others may be merged into them.

A Session runs the graph after this pass on every path of mode="threads" (before partitioning when the graph
spans devices, so a saved graph gets it too); the reference interpreter runs the graph as written, so the test
matrix compares the two. $DFC_CSE=0 turns it off.
"""
import hashlib
import struct

import numpy as np

from dfc import config
from dfc.ir import ops as opreg
from dfc.ir.graph import Graph, Node, parse_input

ENABLED = config.env("DFC_CSE")
NEVER = frozenset({"LoopCond", "Placeholder"})
_INLINE_BYTES = 256       # arrays up to this size are keyed by their bytes; larger ones by a digest, then compared


def mergeable(node):
    """Whether `node` computes a pure function of its inputs and attributes, so that a copy may stand in."""
    opdef = opreg.get(node.op)
    return not (node.op in NEVER or opdef.stateful or opdef.in_executor or opdef.async_kernel or
                opdef.kind != "normal")


def eliminate(graph, keep=(), fed=(), where=None):
    """(graph with its common subexpressions merged, number of nodes removed); graph itself when none is.
    keep: nodes that must stay (fetches, targets); fed: nodes whose value is fed (never merged either way);
    where: node name -> device, when a placement decides devices (else each node's own device)."""
    keep, fed = set(keep), set(fed)
    rep = {}            # removed node -> the node that stands in for it
    table = {}          # key -> [(node name, its arrays)] of the nodes kept with that key
    for n in graph.topo_order():
        if n.name in fed or not mergeable(n):
            continue
        arrays = []
        key = _key(n, rep, arrays, where)
        candidates = table.setdefault(key, [])
        same = None if n.name in keep else next((name for name, arrs in candidates if _same(arrs, arrays)), None)
        if same is None:
            candidates.append((n.name, arrays))
        else:
            rep[n.name] = same
    if not rep:
        return graph, 0
    out = Graph(graph.signature.get("name", "graph"))
    out.signature, out.from_file = graph.signature, graph.from_file
    for n in graph.nodes.values():
        if n.name in rep:
            continue
        if any(parse_input(r)[0] in rep for r in n.inputs):    # (a node that reads none is shared, as folding does)
            n = Node(n.name, n.op, _renamed(n.inputs, rep), n.attrs, n.device, n.loc, n.var)
        out.add_node(n)
    return out, len(rep)


def _renamed(inputs, rep):
    data, ctrl = [], []
    for r in inputs:
        src, port, is_ctrl = parse_input(r)
        src = rep.get(src, src)
        if is_ctrl:
            ctrl.append("^" + src)
        else:
            data.append(f"{src}:{port}")
    return data + list(dict.fromkeys(ctrl))


def _key(n, rep, arrays, where):
    data, ctrl = [], set()
    for r in n.inputs:
        src, port, is_ctrl = parse_input(r)
        src = rep.get(src, src)
        if is_ctrl:
            ctrl.add(src)
        else:
            data.append((src, port))
    device = where.get(n.name) if where is not None else n.device
    return n.op, tuple(data), tuple(sorted(ctrl)), device, _fingerprint(n.attrs, arrays)


def _fingerprint(v, arrays):
    """A hashable stand-in for an attribute value; arrays too large to key by their bytes go to `arrays`
    for an exact comparison."""
    if isinstance(v, dict):
        return ("dict", tuple((k, _fingerprint(x, arrays)) for k, x in sorted(v.items())))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(_fingerprint(x, arrays) for x in v))
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)      # (not ascontiguousarray: it makes a 0-d array 1-d)
        if a.dtype == object:
            arrays.append(a)
            return ("object", id(a))        # never equal to another node's
        raw = a.tobytes()
        if len(raw) <= _INLINE_BYTES:
            return ("array", a.dtype.str, a.shape, raw)
        arrays.append(a)
        return ("array", a.dtype.str, a.shape, hashlib.blake2b(raw, digest_size=16).digest())
    if isinstance(v, (bool, np.bool_)):
        return ("bool", bool(v))
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))      # bit for bit: 0.0 and -0.0 differ, a NaN equals itself
    try:
        hash(v)
    except TypeError:
        return ("unhashable", id(v))    # never equal to another node's
    return (type(v).__name__, v)


def _same(a, b):
    """Whether two nodes' large arrays (same keys already) are equal bit for bit."""
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.dtype != object and
                                    x.tobytes() == y.tobytes() for x, y in zip(a, b))
