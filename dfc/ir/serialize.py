"""JSON <-> Graph. Versioned, deterministic, validated on load.

{"format": "dfc-graph", "version": 1, "signature": {...}, "nodes": [...]}
Constants are inline: {"dtype", "shape", "data": base64 of little-endian bytes}.
"""
import base64
import json

import numpy as np

from dfc.errors import DfcError, DfcGraphError
from dfc.ir import ops as opreg
from dfc.ir import dtypes as dt
from dfc.ir.graph import Graph, Node

FORMAT, VERSION = "dfc-graph", 1


def encode_tensor(v):
    v = np.asarray(v, order="C")
    data = v.astype(v.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"dtype": v.dtype.name, "shape": list(v.shape), "data": base64.b64encode(data).decode("ascii")}


def decode_tensor(d, node=None):
    try:
        dtype = dt.as_dtype(d["dtype"])
        shape = [int(x) for x in d["shape"]]
        raw = base64.b64decode(d["data"], validate=True)
        arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
        return arr.reshape(shape)
    except (KeyError, TypeError, ValueError, DfcError) as e:
        raise DfcGraphError(f"bad constant tensor: {e}", node=node) from None


def _encode_attr(kind, v):
    if kind == "tensor":
        return encode_tensor(v)
    return v


def _decode_attr(kind, v, node):
    if kind == "tensor":
        if not isinstance(v, dict):
            raise DfcGraphError("constant value must be an object", node=node)
        return decode_tensor(v, node)
    return v


def to_json(g):
    nodes = []
    for n in g.nodes.values():
        opdef = opreg.get(n.op)
        d = {"name": n.name, "op": n.op, "inputs": list(n.inputs),
             "attrs": {k: _encode_attr(opdef.attrs[k][0], v) for k, v in sorted(n.attrs.items())}}
        if n.device:
            d["device"] = n.device
        if n.loc:
            d["loc"] = n.loc
        nodes.append(d)
    doc = {"format": FORMAT, "version": VERSION, "signature": g.signature, "nodes": nodes}
    return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"


def from_json(text, source="<string>"):
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DfcGraphError(f"{source}: invalid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DfcGraphError(f"{source}: not a dfc graph (format must be {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise DfcGraphError(f"{source}: unsupported dfc graph version {doc.get('version')!r} (this dfc reads "
                            f"version {VERSION})")
    sig, nodes = doc.get("signature"), doc.get("nodes")
    if not isinstance(sig, dict) or not isinstance(nodes, list):
        raise DfcGraphError(f"{source}: 'signature' must be an object and 'nodes' a list")
    g = Graph(sig.get("name", "graph"))
    g.from_file = True
    for i, d in enumerate(nodes):
        g.add_node(_node_from_json(d, i))
    _check_signature(g, sig)
    g.signature = sig
    g.verify()
    return g


def _node_from_json(d, i):
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("op"), str):
        raise DfcGraphError(f"node #{i} needs a string 'name' and 'op'")
    name, op = d["name"], d["op"]
    if op not in opreg.REGISTRY:
        raise DfcGraphError(f"unknown op {op!r}", node=name)
    inputs, attrs = d.get("inputs", []), d.get("attrs", {})
    if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
        raise DfcGraphError("'inputs' must be a list of strings", node=name)
    if not isinstance(attrs, dict):
        raise DfcGraphError("'attrs' must be an object", node=name)
    opdef = opreg.get(op)
    decoded = {k: _decode_attr(opdef.attrs[k][0], v, name) if k in opdef.attrs else v for k, v in attrs.items()}
    for key in ("device", "loc"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise DfcGraphError(f"'{key}' must be a string", node=name)
    return Node(name, op, inputs, opreg.canonical_attrs(op, decoded, name), d.get("device"), d.get("loc"))


def _check_signature(g, sig):
    for inp in sig.get("inputs", []):
        if not isinstance(inp, dict) or inp.get("node") not in g.nodes:
            raise DfcGraphError(f"signature input {inp!r} names no node")
        if g.nodes[inp["node"]].op != "Placeholder":
            raise DfcGraphError("signature input is not a Placeholder", node=inp["node"])
    for t in sig.get("targets", []):
        if t not in g.nodes:
            raise DfcGraphError(f"signature target {t!r} names no node")
    _check_outputs(g, sig.get("outputs"))


def _check_outputs(g, s):
    from dfc.ir.structure import leaves
    for leaf in leaves(s):
        ref = leaf["ref"]
        name, _, port = ref.rpartition(":")
        if name not in g.nodes:
            raise DfcGraphError(f"output {ref!r} names no node")


def save(g, path):
    text = to_json(g)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise DfcError(f"cannot write {path}: {e}") from None


def load(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DfcError(f"cannot read graph file {path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DfcGraphError(f"{path}: not a UTF-8 JSON file") from None
    return from_json(text, source=str(path))
