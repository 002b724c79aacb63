"""TensorArray: a functional list of tensors usable inside loops and conds (§5.2).

Like TF v1: a handle plus a scalar "flow" value; every write returns a new
TensorArray whose flow orders later reads. It flattens to its flow tensor, so
it can be a loop variable or a cond output.
"""
from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, convert, current_builder, user_location


class _Info:
    """Shared by every TensorArray value of one handle: what is known of its elements."""
    __slots__ = ("dtype", "element_shape")

    def __init__(self, dtype, element_shape):
        self.dtype, self.element_shape = dtype, element_shape


class TensorArray:
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

    def _dfc_stack(self):
        return self.stack()

    def _attrs(self):
        es = self.info.element_shape
        return {"dtype": self.info.dtype, "element_shape": None if es is None else list(es)}

    def _learn(self, shape):
        es = self.info.element_shape
        self.info.element_shape = tuple(shape) if es is None else dt.join_shapes(es, shape)

    def write(self, index, value):
        value = convert(value, self.info.dtype) if not isinstance(value, Tensor) else value
        if value.dtype != self.info.dtype:
            raise DfcTypeError(f"cannot write {value.dtype} into a TensorArray of {self.info.dtype}",
                               loc=user_location())
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
        value = convert(value, self.info.dtype)
        if value.shape is not None and value.shape:
            self._learn(value.shape[1:])
        return self._with_flow(current_builder().make1("TensorArrayUnstack", (self.handle, value, self.flow)))

    def scatter(self, indices, value):
        value = convert(value, self.info.dtype)
        if value.shape is not None and value.shape:
            self._learn(value.shape[1:])
        return self._with_flow(current_builder().make1(
            "TensorArrayScatter", (self.handle, convert(indices, "int64"), value, self.flow)))

    def size(self):
        return current_builder().make1("TensorArraySize", (self.handle, self.flow))

    def __repr__(self):
        return f"<dfc.TensorArray {self.info.dtype} {self.handle.ref}>"
