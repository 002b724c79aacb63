"""The output structure of a graph signature, as JSON.

A structure is {"tensor": "node:port"} ... encoded as:
  {"ref": "node:port"}                 a tensor leaf
  {"tuple": [s, ...]} / {"list": [...]} / {"dict": [[key, s], ...]} / {"none": true}
"""
import reprlib

from dfc.errors import DfcGraphError

MAX_DEPTH = 100


def leaves(s):
    """The {"ref": ...} leaves in depth-first order; a malformed structure is a DfcGraphError."""
    out = []
    _leaves(s, out, 0)
    return out


def _leaves(s, out, depth):
    def bad(what, v):
        return DfcGraphError(f"bad output {what} {reprlib.repr(v)}")
    if s is None:
        return
    if depth > MAX_DEPTH:
        raise DfcGraphError(f"output structure nested more than {MAX_DEPTH} levels deep")
    if not isinstance(s, dict) or len(s) != 1:
        raise bad("structure", s)
    kind, v = next(iter(s.items()))
    if kind == "ref":
        if not isinstance(v, str):
            raise bad("ref", s)
        out.append(s)
    elif kind in ("tuple", "list"):
        if not isinstance(v, list):
            raise bad("structure", s)
        for x in v:
            _leaves(x, out, depth + 1)
    elif kind == "dict":
        if not isinstance(v, list):
            raise bad("structure", s)
        for kv in v:
            if not (isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str)):
                raise bad("dict entry", kv)
            _leaves(kv[1], out, depth + 1)
    elif kind != "none":
        raise bad("structure", s)


def pack(s, values):
    """Rebuild the Python structure from leaf values in leaves() order."""
    it = iter(values)
    return _pack(s, it)


def _pack(s, it):
    if s is None or "none" in s:
        return None
    if "ref" in s:
        return next(it)
    if "tuple" in s:
        return tuple(_pack(x, it) for x in s["tuple"])
    if "list" in s:
        return [_pack(x, it) for x in s["list"]]
    return {k: _pack(v, it) for k, v in s["dict"]}
