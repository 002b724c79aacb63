"""TensorArray: a functional list of tensors usable inside loops and conds (§5.2).

Like TF v1: a handle plus a scalar "flow" value; every write returns a new
TensorArray whose flow orders later reads. It flattens to its flow tensor, so
it can be a loop variable or a cond output.
"""
from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, const_array, convert, current_builder, user_location
from dfc.compiler import eager


def _weak_fits(have, want):
    """A weakly typed value of dtype `have` keeps its value as `want` (same kind or wider)."""
    return have == want or have == "bool" or (have in dt.INTS and want in dt.NUMERIC) or (
        have in dt.FLOATS and want in dt.FLOATS)


def cast(x, dtype):
    from dfc.compiler.ops_api import cast as _cast
    return _cast(x, dtype)


class _Info:
    """Shared by every TensorArray value of one handle: what is known of its elements."""
    __slots__ = ("dtype", "element_shape")

    def __init__(self, dtype, element_shape):
        self.dtype, self.element_shape = dtype, element_shape


class TensorArray:
    """A list of tensors of one dtype inside a graph, functional as in TensorFlow: `write(i, v)`,
    `unstack(t)` and `scatter` return a new TensorArray; `read(i)`, `stack()`, `gather`, `size()` read it.
    `dynamic_size=True` (the default, unlike TF) lets it grow; element shapes must agree. Reading an
    element never written, or an index out of range, is a DfcError at run time. Gradients flow through
    writes and reads (also inside loops)."""
    def __init__(self, dtype, size=0, dynamic_size=True, element_shape=None, accumulate=False,
                 _handle=None, _flow=None, _info=None):
        if _handle is not None:
            self.handle, self.flow, self.info = _handle, _flow, _info
            return
        b = current_builder()
        d = dt.as_dtype(dtype)
        es = None if element_shape is None else [None if x is None else int(x) for x in element_shape]
        self.handle, self.flow = b.make("TensorArray", (convert(size, "int64"),),
                                        {"dtype": d, "dynamic_size": bool(dynamic_size), "element_shape": es,
                                         "accumulate": bool(accumulate)})
        self.info = _Info(d, None if es is None else tuple(es))

    @property
    def dtype(self):
        return self.info.dtype

    @property
    def element_shape(self):
        return self.info.element_shape

    def _with_flow(self, flow):
        return TensorArray(None, _handle=self.handle, _flow=flow, _info=self.info)

    def _dfc_flatten(self):
        return [self.flow]

    def _dfc_unflatten(self, leaves):
        return self._with_flow(leaves[0])

    def _dfc_stack(self, axis=0):
        from dfc.compiler.ops_api import stacked_axis
        return stacked_axis(self.stack(), axis)

    def _attrs(self):
        es = self.info.element_shape
        return {"dtype": self.info.dtype, "element_shape": None if es is None else list(es)}

    def _learn(self, shape):
        es = self.info.element_shape
        self.info.element_shape = tuple(shape) if es is None else dt.join_shapes(es, shape)

    def _element(self, value, what):
        """value as a tensor of the array's dtype. Python numbers and weakly typed tensors (a
        loop result that started as `s = 0`) take it when their kind allows (int -> float yes,
        float -> int no); other dtypes must match."""
        want = self.info.dtype
        value = eager.lift(value)       # outside a graph a numpy value is a tensor
        if not isinstance(value, Tensor) and not hasattr(value, "_dfc_tensor"):
            have = const_array(value).dtype.name
            if have != want and not _weak_fits(have, want):
                raise DfcTypeError(f"cannot {what} {value!r} ({have}) into a TensorArray of {want} "
                                   f"without changing its value; cast it (dfc.cast)",
                                   loc=user_location())
            return convert(value, want)
        value = convert(value)
        if value.dtype != want:
            if value.weak and _weak_fits(value.dtype, want):
                return cast(value, want)
            raise DfcTypeError(f"cannot {what} {value.dtype} into a TensorArray of {want}; cast it "
                               f"(dfc.cast)", loc=user_location())
        return value

    def write(self, index, value):
        value = self._element(value, "write")
        if value.shape is not None:
            self._learn(value.shape)
        b = current_builder()
        return self._with_flow(b.make1("TensorArrayWrite", (self.handle, convert(index, "int64"), value,
                                                             self.flow)))

    def read(self, index):
        return current_builder().make1("TensorArrayRead", (self.handle, convert(index, "int64"), self.flow),
                                       self._attrs())

    def stack(self):
        return current_builder().make1("TensorArrayStack", (self.handle, self.flow), self._attrs())

    def gather(self, indices):
        return current_builder().make1("TensorArrayGather", (self.handle, convert(indices, "int64"), self.flow),
                                       self._attrs())

    def concat(self):
        return current_builder().make1("TensorArrayConcat", (self.handle, self.flow), self._attrs())

    def unstack(self, value):
        value = self._element(value, "unstack")
        if value.shape is not None and value.shape:
            self._learn(value.shape[1:])
        return self._with_flow(current_builder().make1("TensorArrayUnstack", (self.handle, value, self.flow)))

    def scatter(self, indices, value):
        value = self._element(value, "scatter")
        if value.shape is not None and value.shape:
            self._learn(value.shape[1:])
        return self._with_flow(current_builder().make1(
            "TensorArrayScatter", (self.handle, convert(indices, "int64"), value, self.flow)))

    def size(self):
        return current_builder().make1("TensorArraySize", (self.handle, self.flow))

    def __repr__(self):
        if not isinstance(self.handle, Tensor):      # made outside a graph: holds its elements
            return f"<dfc.TensorArray {self.info.dtype} (eager) size={len(self.handle.items)}>"
        return f"<dfc.TensorArray {self.info.dtype} {self.handle.ref}>"
