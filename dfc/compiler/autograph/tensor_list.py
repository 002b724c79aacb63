"""A Python list changed inside a tensor loop, carried through the loop as tensors.

`xs = []; while t: xs.append(v)` cannot keep a Python list (its length would
depend on run-time data), so the loop converts `xs` to a TensorList when it
enters the loop. Its storage (the attribute `ta`) is

- a TensorArray while the list is only appended to or extended (each
  element is written once), or
- one tensor holding the stacked elements ("dense") once it is also popped,
  assigned to (`xs[i] = v`) or deleted from: a TensorArray element cannot be
  written twice, so these rebuild the tensor (concat and slices).

The loop starts with a TensorArray and switches to the dense form when the
body needs it (ListNeeds). `dfc.stack(xs)`, `len(xs)`, `xs[i]` and `for v in
xs` work on both; returning the list returns the stacked tensor.
"""
from dfc import nest
from dfc.compiler import ops_api
from dfc.compiler.tensor_array import TensorArray
from dfc.compiler.autograph import core, loop_scope
from dfc.compiler.autograph.errors import DfcConversionError
from dfc.compiler.autograph.origin import user_location
from dfc.errors import DfcTypeError


class ListNeeds(Exception):
    """The loop that carries `tensor_list` must rebuild it: a dtype/shape is known now
    (the first append to an empty list, or one that settles a guessed dtype), or the
    dense form is needed (dtype None: keep the current one)."""

    def __init__(self, tensor_list, dtype=None, shape=None, dense=False):
        super().__init__("list needs rebuilding")
        self.tensor_list, self.dtype, self.shape, self.dense = tensor_list, dtype, shape, dense



class TensorList:
    def __init__(self, ta, dtype=None, element_shape=None, items=None, key=None, dense=False):
        self.ta, self.dtype, self.element_shape = ta, dtype, element_shape
        self.key = key if key is not None else object()  # shared by its later versions
        # the Python items it was made from, while their dtype is only a guess
        self.items = items
        self._dense = dense     # the form wanted while the list is still untyped

    @classmethod
    def from_list(cls, items, dtype=None, element_shape=None, dense=False):
        items = list(items)
        if not items and dtype is None:
            return cls(None, items=items, dense=dense)
        weak = dtype is None and not any(core.is_tensor(v) for v in items)
        if dtype is None:
            dtype, element_shape = element_type(items[0])
        if dense:
            data = _dense_items(items, dtype, element_shape)
            return cls(data, dtype, data.shape[1:] if data.shape else None,
                       items if weak else None)
        out = cls(TensorArray(dtype, size=0, dynamic_size=True), dtype, element_shape,
                  items if weak else None)
        for item in items:
            out = out.appended(item)
        return out

    @property
    def typed(self):
        return self.ta is not None

    @property
    def dense(self):
        return core.is_tensor(self.ta) if self.ta is not None else self._dense

    def densified(self, dtype=None):
        """This (typed) list in the dense form, as a new list; `dtype`: a wider element type
        its Python items may take."""
        data = self.ta if core.is_tensor(self.ta) else self.ta.stack()
        if dtype is not None and dtype != self.dtype:
            if self.items is None or not _weak_fits(self.dtype, dtype):
                raise DfcTypeError(f"cannot put {dtype} values into a list of {self.dtype} built "
                                   f"in a tensor loop; cast them (dfc.cast)", loc=user_location())
            data = ops_api.cast(data, dtype)
        return TensorList(data, dtype or self.dtype, self.element_shape, self.items)

    def rebuilt(self, storage):
        return TensorList(storage, self.dtype, self.element_shape, self.items, self.key, self._dense)

    # ------------------------------------------------------------ growing
    def appended(self, value):
        value = self._element(value)
        if core.is_tensor(self.ta):
            return self.rebuilt(ops_api.concat([self.ta, ops_api.expand_dims(value, 0)], 0))
        return self.rebuilt(self.ta.write(self.ta.size(), value))

    def extended(self, values):
        """`xs.extend(values)`: a list/tuple of elements, a tensor (its rows) or another TensorList."""
        if isinstance(values, TensorList):
            values = values.stack()
        if not core.is_tensor(values):
            out = self
            for v in list(values):
                out = out.appended(v)
            return out
        if not values.shape:
            raise DfcConversionError("cannot extend a list with a 0-d tensor (it is not iterable)",
                                     loc=user_location())
        rows = self._rows(values)
        if core.is_tensor(self.ta):
            return self.rebuilt(ops_api.concat([self.ta, rows], 0))
        start = self.ta.size()
        indices = ops_api.range(start, start + ops_api.shape(rows)[0], dtype="int64")
        return self.rebuilt(self.ta.scatter(indices, rows))

    # ------------------------------------------------------------ changing (dense form)
    def popped(self, index=-1):
        """(the list without element `index`, that element), like `v = xs.pop(index)`."""
        data = self._dense_data("pop from")
        n = self.size()
        i = self._checked_index(index, n, "pop from empty list" if index == -1
                                else "pop index out of range")
        value = data[i]
        return self.rebuilt(ops_api.concat([data[:i], data[i + 1:]], 0)), value

    def with_item(self, index, value):
        """The list with `xs[index] = value`."""
        data = self._dense_data("assign to an element of")
        if isinstance(index, slice):
            raise DfcConversionError(
                "slice assignment to a list carried through a tensor loop is not supported; "
                "assign its elements one by one", loc=user_location())
        value = self._element(value)
        i = self._checked_index(index, self.size(), "list assignment index out of range")
        return self.rebuilt(ops_api.concat([data[:i], ops_api.expand_dims(value, 0), data[i + 1:]], 0))

    def without_item(self, index):
        """The list with `del xs[index]`."""
        if isinstance(index, slice):
            raise DfcConversionError(
                "deleting a slice of a list carried through a tensor loop is not supported; "
                "pop its elements one by one", loc=user_location())
        self._dense_data("delete from")
        return self.popped(index)[0]

    # ------------------------------------------------------------ reading
    def stack(self, axis=0):
        if self.ta is None:
            raise DfcConversionError(
                "cannot stack a list that stays empty in a tensor loop (its element type is "
                "unknown); create it with dfc.TensorArray(dtype) instead", loc=user_location())
        from dfc.compiler.ops_api import stacked_axis
        return stacked_axis(self.ta if core.is_tensor(self.ta) else self.ta.stack(), axis)

    def _dfc_stack(self, axis=0):
        return self.stack(axis)

    def size(self):
        if self.ta is None:
            return 0
        if core.is_tensor(self.ta):
            n = self.ta.shape[0] if self.ta.shape else None
            return n if n is not None else ops_api.shape(self.ta)[0]
        return self.ta.size()

    def __getitem__(self, index):
        if self.ta is None:
            raise DfcConversionError("list index out of range (the list is empty)",
                                     loc=user_location())
        if isinstance(index, slice):
            return self.stack()[index]
        if core.is_tensor(self.ta):
            return self.ta[index]
        if isinstance(index, int) and index < 0 or core.is_tensor(index):
            index = _non_negative(index, self.size())
        return self.ta.read(index)

    def __setitem__(self, index, value):
        _not_in_place("xs[i] = v")

    def __delitem__(self, index):
        _not_in_place("del xs[i]")

    def __iter__(self):
        raise DfcConversionError(
            "a list built in a tensor loop can only be iterated by a converted `for` loop; "
            "use dfc.stack(xs) to get a tensor", loc=user_location())

    def __len__(self):
        n = self.size()
        if core.is_tensor(n):
            raise DfcConversionError(
                "the length of a list built in a tensor loop is a tensor; call len(xs) in "
                "dfc.function code (it returns the tensor) or use dfc.shape(dfc.stack(xs))[0]",
                loc=user_location())
        return n

    def __repr__(self):
        return f"TensorList(dtype={self.dtype})"

    # methods that change a list in place: only as statements of converted code, which
    # rebinds the variable (`xs = ag__.list_append(xs, v)`); say so instead of AttributeError
    def append(self, value):
        _not_in_place("xs.append(v)")

    def extend(self, values):
        _not_in_place("xs.extend(vs)")

    def pop(self, index=-1):
        _not_in_place("xs.pop()")

    def insert(self, *args):
        _unsupported("insert")

    def remove(self, *args):
        _unsupported("remove")

    def sort(self, *args, **kwargs):
        _unsupported("sort")

    def reverse(self):
        _unsupported("reverse")

    def clear(self):
        _unsupported("clear")

    def index(self, *args):
        _unsupported("index")

    def count(self, *args):
        _unsupported("count")

    def copy(self):
        return self

    # ------------------------------------------------------------ helpers
    def _element(self, value):
        """value as one element of this list, or ListNeeds when the element type changes."""
        self._settle(value, *element_type(value))
        return _as_element(value, self.dtype)

    def _settle(self, value, dtype, shape):
        """ListNeeds if `value` (of `dtype`, elements of `shape`) decides the element type: the
        list is still untyped, or its dtype is a guess made from Python numbers."""
        if self.ta is None:
            raise ListNeeds(self, dtype, shape, self.dense)
        if self.items is not None and dtype != self.dtype:
            if not core.is_tensor(value) or getattr(value, "weak", False):
                from dfc.ir.dtypes import promote
                dtype = promote(self.dtype, dtype)
            raise ListNeeds(self, dtype, shape, self.dense)

    def _rows(self, values):
        self._settle(values, values.dtype, values.shape[1:] if values.shape else None)
        if values.dtype != self.dtype:
            if getattr(values, "weak", False) and _weak_fits(values.dtype, self.dtype):
                return ops_api.cast(values, self.dtype)
            raise DfcTypeError(f"cannot extend a list of {self.dtype} built in a tensor loop with "
                               f"{values.dtype} values; cast them (dfc.cast)", loc=user_location())
        return values

    def _dense_data(self, what):
        """The stacked elements; switches an appended-to list to the dense form."""
        if self.ta is None:
            if not self._dense:
                raise ListNeeds(self, None, None, dense=True)
            raise DfcConversionError(
                f"cannot {what} a list that is empty when the tensor loop starts before anything "
                f"is appended to it (its element type is unknown); give it a first element or "
                f"use dfc.TensorArray(dtype)", loc=user_location())
        if core.is_tensor(self.ta):
            return self.ta
        if loop_scope.carries(self):
            raise ListNeeds(self, None, None, dense=True)
        if self.ta.flow.ctx is not core.current_builder().ctx:
            # in a tensor `if`: the other branch would keep the appended-to form
            raise DfcConversionError(
                f"cannot {what} a list inside a tensor `if` when the tensor loop that built it only "
                f"appended to it; do it in the loop, or stack the list first (dfc.stack(xs)) and "
                f"slice the tensor", loc=user_location())
        return self.ta.stack()     # not a loop variable here: the changed list is dense

    def _checked_index(self, index, n, message):
        """index in [0, n) as a (tensor) int; an in-graph check with Python's message."""
        i = _non_negative(index, n)
        ok = ops_api.logical_and(ops_api.greater_equal(i, 0), ops_api.less(i, n))
        ops_api.Assert(ok, message=f"IndexError: {message}")
        return i


def _non_negative(index, n):
    if core.is_tensor(index):
        if index.dtype not in ("int32", "int64"):
            raise DfcTypeError(f"list indices must be integers, not {index.dtype} tensors",
                               loc=user_location())
        index = ops_api.cast(index, "int64")
        return ops_api.where(ops_api.less(index, 0), ops_api.add(index, n), index)
    if not isinstance(index, int) or isinstance(index, bool):
        raise DfcTypeError(f"list indices must be integers, not {type(index).__name__}",
                           loc=user_location())
    return index + n if index < 0 else index


def _weak_fits(have, want):
    """A weakly typed value of dtype `have` may take dtype `want` without losing its kind."""
    floats, ints = ("float32", "float64"), ("int32", "int64")
    return (have in ints and want in ints + floats) or (have in floats and want in floats) \
        or have == "bool"


def _as_element(value, dtype):
    """value as a tensor of the list's dtype (Python and weakly typed values take it)."""
    if not core.is_tensor(value):
        natural = element_type(value)[0]
        if natural != dtype and not _weak_fits(natural, dtype):
            raise DfcTypeError(f"cannot put {value!r} into a list of {dtype} built in a tensor "
                               f"loop without changing its value", loc=user_location())
        return ops_api.constant(value, dtype=dtype)
    if value.dtype != dtype:
        if getattr(value, "weak", False) and _weak_fits(value.dtype, dtype):
            return ops_api.cast(value, dtype)
        raise DfcTypeError(f"cannot put a {value.dtype} value into a list of {dtype} built in a "
                           f"tensor loop; cast it (dfc.cast)", loc=user_location())
    return value


def _dense_items(items, dtype, element_shape):
    if not items:
        if element_shape is None or None in element_shape:
            raise DfcConversionError(
                f"a list that is empty before a tensor loop and is popped, assigned to or deleted "
                f"from in it needs elements of a known shape (they are {element_shape}); give it a "
                f"first element before the loop, or use dfc.TensorArray", loc=user_location())
        return ops_api.zeros([0] + list(element_shape), dtype)
    return ops_api.stack([_as_element(v, dtype) for v in items])


def _unsupported(method):
    raise DfcConversionError(
        f"list.{method}() is not supported on a list carried through a tensor loop (it is "
        f"stored as tensors); use append/extend/pop/`xs[i] = v`, or dfc.TensorArray",
        loc=user_location())


def _not_in_place(what):
    raise DfcConversionError(
        f"{what} on a list carried through a tensor loop is supported only as a statement of its "
        f"own on a local variable of the dfc.function (e.g. `v = xs.pop()`, not inside an "
        f"expression or in a function it calls)", loc=user_location())


def element_type(value):
    if not core.is_tensor(value) and any(core.is_tensor(v) for v in nest.flatten(value)):
        value = ops_api.constant(value)       # a tuple of tensors: one stacked element
    if core.is_tensor(value):
        return value.dtype, value.shape
    from dfc.compiler.tracing import const_array
    a = const_array(value)
    return a.dtype.name, a.shape


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
