"""numpy.ndarray's methods on symbolic tensors: t.sum(axis=0), t.T, t.astype("float64"), t.dot(w) ...

Each method is the dfc function of the same name with ndarray's signature (axis=None means every
axis; keepdims keeps reduced axes as size 1). Attached to Tensor when dfc.compiler.ops_api loads.
Methods that modify the array in place (sort, fill, resize, itemset) do not exist: tensors are values.
"""
from dfc.errors import DfcTypeError
from dfc.compiler import ops_api as K
from dfc.compiler import numpy_api as N
from dfc.compiler.tracing import Tensor, user_location


def _shape_args(shape):
    return shape[0] if len(shape) == 1 else list(shape)


def _with_dtype(reducer):
    def method(self, axis=None, dtype=None, keepdims=False):
        x = self if dtype is None else K.cast(self, dtype)
        return reducer(x, axis, keepdims)
    return method


def _plain(reducer):
    def method(self, axis=None, keepdims=False):
        return reducer(self, axis, keepdims)
    return method


def _arg(fn):
    """ndarray.argmax/argmin: int64 indices; over the flattened tensor when axis is None."""
    def method(self, axis=None, keepdims=False):
        if axis is None:
            out = fn(K.reshape(self, [-1]), 0)
            return K.reshape(out, [1] * self.ndim) if keepdims and self.ndim is not None else out
        out = fn(self, axis)
        return K.expand_dims(out, axis) if keepdims else out
    return method


def reshape(self, *shape):
    """t.reshape(2, 3) or t.reshape((2, 3)); -1 infers one dimension."""
    return K.reshape(self, _shape_args(shape))


def transpose(self, *axes):
    """t.transpose() reverses the axes; t.transpose(1, 0, 2) or t.transpose((1, 0, 2)) permutes them."""
    if not axes or axes == (None,):
        return K.transpose(self)
    return K.transpose(self, _shape_args(axes))


def flatten(self):
    """A 1-D copy of t (row-major order). Same as t.ravel()."""
    return K.reshape(self, [-1])


def squeeze(self, axis=None):
    """t without its axes of size 1 (only `axis`, an int or tuple, when given)."""
    return K.squeeze(self, axis)


def clip(self, min=None, max=None):
    """t limited to [min, max] elementwise (either bound may be None): dfc.clip."""
    return K.clip(self, min, max)


def cumsum(self, axis=None, dtype=None):
    """Cumulative sum along axis (of the flattened t when axis is None): dfc.cumsum."""
    return N.cumsum(self, axis, dtype)


def cumprod(self, axis=None, dtype=None):
    """Cumulative product along axis (of the flattened t when axis is None): dfc.cumprod."""
    return N.cumprod(self, axis, dtype)


def dot(self, other):
    """numpy.dot: matmul for 1-D and 2-D operands, a product with a scalar, and for N-D operands the
    sum over t's last axis and other's second-to-last (dot(a, b)[i, j, k, m] = sum(a[i, j, :] * b[k, :, m]))."""
    a, b = K.operands(self, other)
    if a.ndim == 0 or b.ndim == 0:
        return K.multiply(a, b)
    if a.ndim is None or b.ndim is None:
        raise DfcTypeError("t.dot(other) needs operands of known rank", loc=user_location())
    if a.ndim <= 2 and b.ndim <= 2:
        return K.matmul(a, b)
    letters = "abcdefghijklmnopqrstuvwxyz"
    sa = letters[:a.ndim]
    sb = letters[a.ndim:a.ndim + b.ndim - 2] + sa[-1] + (letters[a.ndim + b.ndim - 2] if b.ndim >= 2 else "")
    out = sa[:-1] + sb.replace(sa[-1], "")
    return N.einsum(f"{sa},{sb}->{out}", a, b)


def astype(self, dtype):
    """t converted to dtype (a name or numpy dtype): dfc.cast."""
    return K.cast(self, dtype)


def argsort(self, axis=-1):
    """Indices that sort t along axis (stable): dfc.argsort."""
    return N.argsort(self, axis)


def repeat(self, repeats, axis=None):
    """dfc.repeat(t, repeats, axis)."""
    return N.repeat(self, repeats, axis)


METHODS = {
    "sum": _with_dtype(K.reduce_sum), "mean": _with_dtype(K.reduce_mean), "prod": _with_dtype(K.reduce_prod),
    "max": _plain(K.reduce_max), "min": _plain(K.reduce_min),
    "all": _plain(K.reduce_all), "any": _plain(K.reduce_any),
    "argmax": _arg(K.argmax), "argmin": _arg(K.argmin),
    "astype": astype, "reshape": reshape, "transpose": transpose, "flatten": flatten, "ravel": flatten,
    "squeeze": squeeze, "clip": clip, "cumsum": cumsum, "cumprod": cumprod, "dot": dot,
    "argsort": argsort, "repeat": repeat,
}

_DOCS = {"sum": "Sum over axis (every axis when None), in `dtype` if given: dfc.reduce_sum.",
         "mean": "Mean over axis (every axis when None), in `dtype` if given: dfc.reduce_mean.",
         "prod": "Product over axis (every axis when None), in `dtype` if given: dfc.reduce_prod.",
         "max": "Largest element over axis (every axis when None): dfc.reduce_max.",
         "min": "Smallest element over axis (every axis when None): dfc.reduce_min.",
         "all": "True where every element over axis is true: dfc.reduce_all.",
         "any": "True where some element over axis is true: dfc.reduce_any.",
         "argmax": "Index (int64) of the largest element along axis (of the flattened t when None).",
         "argmin": "Index (int64) of the smallest element along axis (of the flattened t when None)."}


def attach(cls=Tensor):
    """Put the methods (and the .T property) on the Tensor class."""
    for name, fn in METHODS.items():
        if name in _DOCS:
            fn.__doc__ = _DOCS[name]
        fn.__name__ = name
        setattr(cls, name, fn)
    cls.T = property(lambda self: K.transpose(self), doc="t with its axes reversed (numpy's ndarray.T).")


attach()
