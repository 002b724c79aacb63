"""dfc dtypes: names, numpy mapping, promotion, and TType (dtype + static shape)."""
import numpy as np

from dfc.errors import DfcTypeError

NUMERIC = ("float32", "float64", "int32", "int64")
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
ALL = NUMERIC + ("bool",)
# Non-array values the runtime passes along edges: variable/stack/TensorArray handles.
HANDLE = "resource"
DTYPES = ALL + (HANDLE,)

_NP = {name: np.dtype(name) for name in ALL}


def as_dtype(d):
    """Normalise a dtype given as str, numpy dtype or numpy/Python type to its name."""
    if isinstance(d, str) and d in DTYPES:
        return d
    if d is float:      # Python's float: the default float (float32 unless dfc.config.set_default_float)
        from dfc import config
        return config.default_float()
    if d is int:
        return "int64"
    if d is bool:
        return "bool"
    try:
        name = np.dtype(d).name
    except TypeError as e:
        raise DfcTypeError(f"unknown dtype {d!r}") from e
    if name not in ALL:
        raise DfcTypeError(f"unsupported dtype {name!r} (dfc supports {', '.join(ALL)})")
    return name


def promote(a, b):
    """numpy's promotion of two dfc dtypes."""
    if a == b:
        return a
    return as_dtype(np.promote_types(_NP[a], _NP[b]))


def is_float(d):
    return d in FLOATS


class TType:
    """The static type of a tensor: a dtype name and a shape.

    `shape` is a tuple whose entries are ints or None (unknown size), or None
    when even the rank is unknown. `value` is the numpy value when it is known
    while building (constants), else None.
    """

    __slots__ = ("dtype", "shape", "value")

    def __init__(self, dtype, shape, value=None):
        self.dtype = dtype
        self.shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self.value = value

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    def __eq__(self, other):
        return isinstance(other, TType) and (self.dtype, self.shape) == (other.dtype, other.shape)

    def __hash__(self):
        return hash((self.dtype, self.shape))

    def __repr__(self):
        return f"{self.dtype}{format_shape(self.shape)}"


def format_shape(shape):
    if shape is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def join_shapes(a, b):
    """The most specific shape compatible with both (dims that differ become None)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def shapes_compatible(a, b):
    if a is None or b is None:
        return True
    if len(a) != len(b):
        return False
    return all(x is None or y is None or x == y for x, y in zip(a, b))
