"""JSON <-> Graph. Versioned, deterministic, validated on load.

{"format": "dfc-graph", "version": 1, "signature": {...}, "nodes": [...]}
Constants are inline: {"dtype", "shape", "data": base64 of little-endian bytes}.
"""
import base64
import json
import math
import reprlib

import numpy as np

from dfc.errors import DfcError, DfcGraphError
from dfc.ir import checks
from dfc.ir import ops as opreg
from dfc.ir import dtypes as dt
from dfc.ir.graph import Graph, Node

FORMAT, VERSION = "dfc-graph", 1
MAX_DEPTH = 256      # JSON nesting; an output structure may nest 100 levels (dfc.ir.structure)


def encode_tensor(v):
    v = np.asarray(v, order="C")
    data = v.astype(v.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"dtype": v.dtype.name, "shape": list(v.shape), "data": base64.b64encode(data).decode("ascii")}


def decode_tensor(d, node=None):
    """The array of an encoded constant; its byte count must match dtype and shape exactly."""
    def bad(why):
        return DfcGraphError(f"bad constant tensor: {why}", node=node)
    if not isinstance(d, dict) or set(d) != {"dtype", "shape", "data"}:
        raise bad("it must be an object with exactly 'dtype', 'shape' and 'data'")
    dtype, shape, data = d["dtype"], d["shape"], d["data"]
    if not isinstance(dtype, str) or dtype not in dt.ALL:
        raise bad(f"dtype {reprlib.repr(dtype)} is not one of {', '.join(dt.ALL)}")
    if not isinstance(shape, list) or not all(opreg._is_int(x) and 0 <= x <= opreg.INT_MAX for x in shape) \
            or len(shape) > 64:
        raise bad(f"shape {reprlib.repr(shape)} is not a list of at most 64 dimensions >= 0")
    if not isinstance(data, str):
        raise bad("data must be a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError as e:
        raise bad(f"data is not base64: {e}") from None
    want = math.prod(shape) * np.dtype(dtype).itemsize
    if len(raw) != want:
        raise bad(f"data has {len(raw)} bytes, but {dtype}{shape} needs {want}")
    arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    return arr.reshape(shape)


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
        if n.var:
            d["var"] = n.var
        nodes.append(d)
    doc = {"format": FORMAT, "version": VERSION, "signature": g.signature, "nodes": nodes}
    return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"


def loads(text, source="<string>"):
    """The Graph in a JSON string (what dfc.save writes); validated like dfc.load."""
    return from_json(text, source)


def from_json(text, source="<string>"):
    try:
        doc = json.loads(text)
    except RecursionError:
        raise DfcGraphError(f"{source}: JSON nested too deeply") from None
    except ValueError as e:      # JSONDecodeError, UnicodeDecodeError, an int of more than 4300 digits
        raise DfcGraphError(f"{source}: invalid JSON: {e}") from None
    if _depth(doc) > MAX_DEPTH:
        raise DfcGraphError(f"{source}: JSON nested more than {MAX_DEPTH} levels deep")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DfcGraphError(f"{source}: not a dfc graph (format must be {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise DfcGraphError(f"{source}: unsupported dfc graph version {doc.get('version')!r} (this dfc reads "
                            f"version {VERSION})")
    sig, nodes = doc.get("signature"), doc.get("nodes")
    if not isinstance(sig, dict) or not isinstance(nodes, list):
        raise DfcGraphError(f"{source}: 'signature' must be an object and 'nodes' a list")
    g = Graph("graph")
    g.from_file = True
    for i, d in enumerate(nodes):
        g.add_node(_node_from_json(d, i))
    g.signature = {"name": "graph", "inputs": [], "outputs": None, "targets": [], **sig}
    g.verify()     # the signature included
    return g


def _depth(doc):
    """How deeply lists and objects nest in a parsed JSON document (without recursion)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if d <= MAX_DEPTH:
            stack.extend((x, d + 1) for x in v)
    return deepest


def _node_from_json(d, i):
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("op"), str):
        raise DfcGraphError(f"node #{i} needs a string 'name' and 'op'")
    name, op = d["name"], d["op"]
    checks.check_name(name)
    if op not in opreg.REGISTRY:
        raise DfcGraphError(f"unknown op {checks.shown(op)}", node=name)
    inputs, attrs = d.get("inputs", []), d.get("attrs", {})
    if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
        raise DfcGraphError("'inputs' must be a list of strings", node=name)
    for ref in inputs:      # "^name" (a control input) or "name[:port]"
        checks.check_name(ref[1:] if ref.startswith("^") else ref.rpartition(":")[0] or ref, "input", name)
    if not isinstance(attrs, dict):
        raise DfcGraphError("'attrs' must be an object", node=name)
    if op == "Restore":
        attrs = _one_variable_restore(attrs)
    opdef = opreg.get(op)
    decoded = {k: _decode_attr(opdef.attrs[k][0], v, name) if k in opdef.attrs else v for k, v in attrs.items()}
    for key in ("device", "loc", "var"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise DfcGraphError(f"'{key}' must be a string", node=name)
    extra = set(d) - {"name", "op", "inputs", "attrs", "device", "loc", "var"}
    if extra:
        raise DfcGraphError(f"unknown node field(s) {checks.shown(', '.join(sorted(map(repr, extra))))}",
                            node=name)
    if d.get("device"):
        checks.check_name(d["device"], "device", name, device=True)
    for key in ("loc", "var"):
        if d.get(key) is not None:
            checks.check_text(d[key], repr(key), name)
    attrs = opreg.canonical_attrs(op, decoded, name)
    _check_strings(op, attrs, name)
    return Node(name, op, inputs, attrs, d.get("device"), d.get("loc"), d.get("var"))


def _one_variable_restore(attrs):
    """Files written before Restore read a whole checkpoint hold one Restore per variable (attrs name, dtype,
    shape): read each as a Restore of that one variable, so those graphs keep loading and running."""
    if "name" not in attrs or "names" in attrs or set(attrs) - {"path", "name", "dtype", "shape"}:
        return attrs
    return {"path": attrs.get("path"), "names": [attrs["name"]], "dtypes": [attrs.get("dtype")],
            "shapes": [attrs.get("shape")]}


def _check_strings(op, attrs, name):
    """A loop's frame name is a name and a Send/Recv device a device (checks.NAME_RE, DEVICE_RE); every
    other string attribute is text (checks.check_text)."""
    for k, (kind, _) in opreg.get(op).attrs.items():
        v = attrs.get(k)
        if v is None or kind not in ("str", "strs"):
            continue
        if k == "frame_name":
            checks.check_name(v, "frame name", name)
        elif k in ("send_device", "recv_device"):
            checks.check_name(v, f"{op} attr {k!r}", name, device=True)
        else:
            for x in [v] if kind == "str" else v:
                checks.check_text(x, f"{op} attr {k!r}", name, free=(op, k) in checks.FREE_TEXT)


def save(g, path):
    """Write Graph `g` to `path` as dfc-graph JSON (deterministic: the same program writes the same bytes).
    An unwritable path is a DfcError."""
    text = to_json(g)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise DfcError(f"cannot write {path}: {e}") from None


def load(path):
    """The Graph saved at `path`, validated (a missing or malformed file, or a bad node, is a DfcError
    naming it; never an OSError or a JSON error). A loaded graph's Save/Restore paths stay confined to the
    Session's checkpoint directory."""
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
