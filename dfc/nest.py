"""Nested structures (tuple, list, dict, namedtuple) of leaves.

Dict keys are visited in sorted order so flattening is deterministic.
Objects with `_dfc_flatten()` / `_dfc_unflatten(leaves)` (TensorArray) are
composites: they flatten to their tensors and are rebuilt from them.
"""


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


def is_nested(x):
    return isinstance(x, (tuple, list, dict))


def _sorted_keys(d):
    try:
        return sorted(d)
    except TypeError:
        return list(d)


def flatten(x, expand_composites=False):
    out = []
    _flatten(x, out, expand_composites)
    return out


def _flatten(x, out, expand):
    if isinstance(x, dict):
        for k in _sorted_keys(x):
            _flatten(x[k], out, expand)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _flatten(v, out, expand)
    elif expand and hasattr(x, "_dfc_flatten"):
        for v in x._dfc_flatten():
            _flatten(v, out, expand)
    else:
        out.append(x)


def pack_sequence_as(structure, leaves, expand_composites=False):
    it = iter(leaves)
    result = _pack(structure, it, expand_composites)
    rest = list(it)
    if rest:
        raise ValueError(f"{len(rest)} leaves left over when packing")
    return result


def _pack(s, it, expand):
    if isinstance(s, dict):
        vals = {k: _pack(s[k], it, expand) for k in _sorted_keys(s)}
        return type(s)((k, vals[k]) for k in s) if type(s) is not dict else {k: vals[k] for k in s}
    if _is_namedtuple(s):
        return type(s)(*[_pack(v, it, expand) for v in s])
    if isinstance(s, (tuple, list)):
        return type(s)(_pack(v, it, expand) for v in s)
    if expand and hasattr(s, "_dfc_flatten"):
        n = len(s._dfc_flatten())
        return s._dfc_unflatten([next(it) for _ in range(n)])
    return next(it)


def map_structure(fn, *structures):
    flat = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*flat)])


def same_structure(a, b, expand_composites=False):
    """True if a and b have the same nesting (types and dict keys)."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(a) != set(b):
            return False
        return all(same_structure(a[k], b[k], expand_composites) for k in a)
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if not (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))):
            return False
        if isinstance(a, list) != isinstance(b, list) or len(a) != len(b):
            return False
        return all(same_structure(x, y, expand_composites) for x, y in zip(a, b))
    if expand_composites and (hasattr(a, "_dfc_flatten") or hasattr(b, "_dfc_flatten")):
        return type(a) is type(b)
    return True
