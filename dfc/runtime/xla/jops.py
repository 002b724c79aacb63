"""dfc's pure kernels written with jax.numpy, for the XLA prototype (lower.py).

Each lowering is `fn(node, args) -> list of outputs` and follows the numpy kernel of the same op in
dfc/runtime/kernels/ (same formula where XLA's rounding would otherwise differ, e.g. Sigmoid through tanh).
Inputs that must be static for XLA (shapes, slice bounds) arrive as numpy arrays: lower.py folds every op
whose inputs are all concrete with dfc's own numpy kernel, so shape arithmetic never reaches these.
Imported only by lower.py, after jax is.
"""
import numpy as np

import jax.numpy as jnp

from dfc.errors import DfcGraphError

_BINARY = {
    "Add": jnp.add, "Sub": jnp.subtract, "Mul": jnp.multiply, "Div": jnp.true_divide,
    "FloorDiv": jnp.floor_divide, "Mod": jnp.mod, "Pow": jnp.power, "Maximum": jnp.maximum,
    "Minimum": jnp.minimum, "Less": jnp.less, "LessEqual": jnp.less_equal, "Greater": jnp.greater,
    "GreaterEqual": jnp.greater_equal, "Equal": jnp.equal, "NotEqual": jnp.not_equal,
    "LogicalAnd": jnp.logical_and, "LogicalOr": jnp.logical_or,
}
_UNARY = {
    "Neg": jnp.negative, "Abs": jnp.abs, "Sign": jnp.sign, "Square": jnp.square, "Sqrt": jnp.sqrt,
    "Rsqrt": lambda x: 1 / jnp.sqrt(x), "Reciprocal": lambda x: 1 / x, "Exp": jnp.exp, "Log": jnp.log,
    "Log1p": jnp.log1p, "Sin": jnp.sin, "Cos": jnp.cos, "Tanh": jnp.tanh, "Floor": jnp.floor,
    "Ceil": jnp.ceil, "Round": jnp.round, "IsFinite": jnp.isfinite, "LogicalNot": jnp.logical_not,
    "ZerosLike": jnp.zeros_like, "OnesLike": jnp.ones_like,
    "Identity": lambda x: x, "StopGradient": lambda x: x, "LoopCond": lambda x: x,
    "Sigmoid": lambda x: _sigmoid(x),
    "Relu": lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)),
}
_REDUCE = {"Sum": (jnp.sum, True), "Prod": (jnp.prod, True), "Mean": (jnp.mean, True),
           "Max": (jnp.max, False), "Min": (jnp.min, False), "All": (jnp.all, False), "Any": (jnp.any, False)}


def _sigmoid(x):
    h = jnp.asarray(0.5, x.dtype)       # the numpy kernel's formula: one transcendental, stable for large |x|
    return h + h * jnp.tanh(h * x)


class NotLowerable(DfcGraphError):
    """A node the XLA prototype has no lowering for (or a structure it cannot express)."""


def static(x, node, what):
    """x as a numpy array, which XLA needs (a shape, a slice bound); an error naming the node if x is traced."""
    if isinstance(x, (np.ndarray, np.generic, int, float)):
        return np.asarray(x)
    raise NotLowerable(f"{node.op}: the {what} must be known when compiling, but it is computed in the graph",
                       node=node.name)


def _shape(x, node):
    return tuple(int(d) for d in static(x, node, "shape").reshape(-1))


def sum_to_shape(x, shape):
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    if lead:
        x = jnp.sum(x, axis=tuple(range(lead)), dtype=x.dtype)
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    if axes:
        x = jnp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    return jnp.reshape(x, shape)


def build_index(node, spec, dyn):
    idx = []

    def part(p):
        if isinstance(p, dict):
            v = dyn[p["t"]]
            return int(v) if isinstance(v, (np.ndarray, np.generic)) else v
        return p
    for item in spec:
        kind = item[0]
        if kind == "int":
            idx.append(part(item[1]))
        elif kind == "slice":
            bounds = [part(p) for p in item[1:]]
            if any(not isinstance(b, (int, type(None))) for b in bounds):
                raise NotLowerable("a slice with a bound computed in the graph (its size must be static)",
                                   node=node.name)
            idx.append(slice(*bounds))
        elif kind == "newaxis":
            idx.append(None)
        elif kind == "ellipsis":
            idx.append(Ellipsis)
        else:
            idx.append(dyn[item[1]])
    return tuple(idx)


def lower(node, args):
    """The outputs of `node` on jax (or numpy) arrays `args`."""
    op, at = node.op, node.attrs
    if op in _BINARY:
        return [_BINARY[op](args[0], args[1])]
    if op in _UNARY:
        return [_UNARY[op](jnp.asarray(args[0]))]
    if op in _REDUCE:
        fn, keep_dtype = _REDUCE[op]
        axis = at.get("axis")
        axis = tuple(axis) if isinstance(axis, list) else axis
        x = jnp.asarray(args[0])
        kw = {"dtype": x.dtype} if keep_dtype else {}
        return [fn(x, axis=axis, keepdims=at.get("keepdims", False), **kw)]
    if op == "Where":
        return [jnp.where(args[0], args[1], args[2])]
    if op == "CustomGradient":       # forwards its values (its other inputs only mark the gradient's target)
        return list(args[:at["num_values"]])
    if op == "MatMul":
        x, y = jnp.asarray(args[0]), jnp.asarray(args[1])
        if at.get("transpose_a", False):
            x = jnp.swapaxes(x, -1, -2)
        if at.get("transpose_b", False):
            y = jnp.swapaxes(y, -1, -2)
        return [jnp.matmul(x, y)]
    if op in ("Softmax", "LogSoftmax"):
        axis = at.get("axis", -1)
        z = args[0] - jnp.max(args[0], axis=axis, keepdims=True)
        if op == "LogSoftmax":
            return [z - jnp.log(jnp.sum(jnp.exp(z), axis=axis, keepdims=True))]
        e = jnp.exp(z)
        return [e / jnp.sum(e, axis=axis, keepdims=True)]
    if op == "Cast":
        return [jnp.asarray(args[0]).astype(at["dtype"])]
    if op in ("ArgMax", "ArgMin"):
        fn = jnp.argmax if op == "ArgMax" else jnp.argmin
        return [fn(args[0], axis=at.get("axis", -1)).astype(jnp.int64)]
    if op == "Shape":
        return [np.array(jnp.shape(args[0]), dtype=np.int64)]
    if op == "Size":
        return [np.array(jnp.size(args[0]), dtype=np.int64)]
    if op == "Rank":
        return [np.array(jnp.ndim(args[0]), dtype=np.int64)]
    if op == "Reshape":
        return [jnp.reshape(args[0], _shape(args[1], node))]
    if op == "Fill":
        v = jnp.asarray(args[1])
        return [jnp.full(_shape(args[0], node), v, dtype=v.dtype)]
    if op == "BroadcastTo":
        return [jnp.broadcast_to(args[0], _shape(args[1], node))]
    if op == "SumToShape":
        return [sum_to_shape(jnp.asarray(args[0]), _shape(args[1], node))]
    if op == "Transpose":
        return [jnp.transpose(args[0], at.get("perm"))]
    if op == "ExpandDims":
        return [jnp.expand_dims(args[0], at["axis"])]
    if op == "Squeeze":
        ax = at.get("axis")
        return [jnp.squeeze(args[0], axis=tuple(ax) if isinstance(ax, list) else ax)]
    if op == "Concat":
        return [jnp.concatenate(args, axis=at.get("axis", 0))]
    if op == "Stack":
        return [jnp.stack(args, axis=at.get("axis", 0))]
    if op == "Unstack":
        ax, num = at.get("axis", 0), at["num"]
        x = jnp.asarray(args[0])
        if x.shape[ax] != num:
            raise NotLowerable(f"Unstack of {num} along a dimension of size {x.shape[ax]}", node=node.name)
        return list(jnp.moveaxis(x, ax, 0))
    if op == "GetItem":
        return [jnp.asarray(args[0])[build_index(node, at["spec"], args[1:])]]
    if op == "GetItemGrad":
        g = jnp.asarray(args[0])
        out = jnp.zeros(_shape(args[1], node), g.dtype)
        idx = build_index(node, at["spec"], args[2:])
        if any(item[0] == "tensor" for item in at["spec"]):
            return [out.at[idx].add(g)]      # an index array may repeat positions: accumulate
        return [out.at[idx].set(g)]
    if op == "Gather":
        return [jnp.take(args[0], args[1], axis=at.get("axis", 0))]
    if op == "OneHot":
        hot = jnp.asarray(args[0])[..., None] == jnp.arange(at["depth"])
        return [jnp.where(hot, at.get("on", 1.0), at.get("off", 0.0)).astype(at["dtype"])]
    raise NotLowerable(f"no XLA lowering for op {op}", node=node.name)
