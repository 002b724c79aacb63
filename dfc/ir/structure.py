"""The output structure of a graph signature, as JSON.

A structure is {"tensor": "node:port"} ... encoded as:
  {"ref": "node:port"}                 a tensor leaf
  {"tuple": [s, ...]} / {"list": [...]} / {"dict": [[key, s], ...]} / {"none": true}
"""
from dfc.errors import DfcGraphError


def leaves(s):
    out = []
    _leaves(s, out)
    return out


def _leaves(s, out):
    if s is None:
        return
    if not isinstance(s, dict):
        raise DfcGraphError(f"bad output structure {s!r}")
    if "ref" in s:
        if not isinstance(s["ref"], str):
            raise DfcGraphError(f"bad output ref {s!r}")
        out.append(s)
    elif "tuple" in s or "list" in s:
        items = s.get("tuple", s.get("list"))
        if not isinstance(items, list):
            raise DfcGraphError(f"bad output structure {s!r}")
        for x in items:
            _leaves(x, out)
    elif "dict" in s:
        for kv in s["dict"]:
            if not (isinstance(kv, list) and len(kv) == 2):
                raise DfcGraphError(f"bad output dict entry {kv!r}")
            _leaves(kv[1], out)
    elif "none" in s:
        return
    else:
        raise DfcGraphError(f"bad output structure {s!r}")


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
