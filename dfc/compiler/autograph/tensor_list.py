"""A Python list appended to inside a tensor loop, carried as a TensorArray.

`xs = []; while t: xs.append(v)` cannot keep a Python list (its length would
depend on run-time data), so the loop converts `xs` to a TensorList when it
enters the loop. `dfc.stack(xs)`, `len(xs)`, `xs[i]` and `for v in xs` work on
it; returning it returns the stacked tensor.
"""
from dfc.compiler.autograph import core
from dfc.compiler.autograph.errors import DfcConversionError
from dfc.compiler.autograph.origin import user_location


class ElementTypeNeeded(Exception):
    """Raised by the first append to an empty list whose element type is unknown."""

    def __init__(self, tensor_list, dtype, shape):
        super().__init__("element type needed")
        self.tensor_list, self.dtype, self.shape = tensor_list, dtype, shape


class TensorList:
    def __init__(self, ta, dtype=None, element_shape=None, items=None, key=None):
        self.ta, self.dtype, self.element_shape = ta, dtype, element_shape
        self.key = key if key is not None else object()  # shared by its later versions
        # the Python items it was made from, while their dtype is only a guess
        self.items = items

    @classmethod
    def from_list(cls, items, dtype=None, element_shape=None):
        items = list(items)
        if not items and dtype is None:
            return cls(None, items=items)
        weak = dtype is None and not any(core.is_tensor(v) for v in items)
        if dtype is None:
            dtype, element_shape = element_type(items[0])
        ta = core.dfc().TensorArray(dtype, size=0, dynamic_size=True)
        out = cls(ta, dtype, element_shape, items if weak else None)
        for item in items:
            out = out.append(item)
        return out

    @property
    def typed(self):
        return self.ta is not None

    def append(self, value):
        if self.ta is None or (self.items is not None and core.is_tensor(value)
                               and value.dtype != self.dtype):
            dtype, shape = element_type(value)
            raise ElementTypeNeeded(self, dtype, shape)
        return TensorList(self.ta.write(self.ta.size(), value), self.dtype, self.element_shape,
                          self.items, self.key)

    def stack(self):
        if self.ta is None:
            raise DfcConversionError(
                "cannot stack a list that stays empty in a tensor loop (its element type is "
                "unknown); create it with dfc.TensorArray(dtype) instead", loc=user_location())
        return self.ta.stack()

    _dfc_stack = stack

    def size(self):
        return self.ta.size() if self.ta is not None else 0

    def __getitem__(self, index):
        return self.ta.read(index)

    def __iter__(self):
        raise DfcConversionError(
            "a list built in a tensor loop can only be iterated by a converted `for` loop; "
            "use dfc.stack(xs) to get a tensor", loc=user_location())

    def __repr__(self):
        return f"TensorList(dtype={self.dtype})"


def element_type(value):
    if core.is_tensor(value):
        return value.dtype, value.shape
    t = core.dfc().constant(value)
    return t.dtype, t.shape


def stacked(value):
    """TensorLists inside `value` (top level or list/tuple/dict) -> stacked tensors."""
    if isinstance(value, TensorList):
        return value.stack()
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(stacked(v) for v in value)
    if isinstance(value, list):
        return [stacked(v) for v in value]
    if isinstance(value, dict):
        return {k: stacked(v) for k, v in value.items()}
    return value
