"""Sparse gradients: a Variable read only through row gathers gets its gradient as rows, not a dense table.

    g = dfc.sparse_gradients(loss, [table])[0]   # an IndexedSlices when loss reads table only by gathers
    g.indices, g.values                          # rows g.values[i] belong at row g.indices[i]
    g.dense()                                    # == dfc.gradients(loss, table)

Optimizers use it (Optimizer.compute_gradients): SGD and Adagrad then update only the touched rows of
the Variable (ResourceScatterSub, a stateful op on the Variable's device), with the same result as the
dense update; the others apply `g.dense()`. As TensorFlow's IndexedSlices, but only for gathers along
axis 0 of a Variable read at the level `sparse_gradients` is called from (not inside a loop or cond);
any other read of the Variable gives the dense gradient.
"""
from dfc.compiler import ops_api
from dfc.compiler.autodiff import gradients
from dfc.compiler.tracing import current_builder
from dfc.compiler.variables import Variable
from dfc.ir.graph import parse_input

_UPDATES = ("Assign", "AssignAdd", "AssignSub", "ResourceScatterAdd", "ResourceScatterSub")


class IndexedSlices:
    """Rows of a tensor of `dense_shape`: the dense tensor is zeros with values[i] added at row indices[i]
    (duplicate indices add up). indices: int64 [n]; values: [n, *dense_shape[1:]]."""

    def __init__(self, indices, values, dense_shape):
        self.indices, self.values, self.dense_shape = indices, values, tuple(dense_shape)

    @property
    def dtype(self):
        return self.values.dtype

    def dense(self):
        """The dense tensor (what dfc.gradients gives for the Variable)."""
        return current_builder().make1("ScatterAdd", (ops_api.constant(list(self.dense_shape), "int64"),
                                                      self.indices, self.values), {"axis": 0})

    def deduplicated(self):
        """The same rows with each index once (sorted), its rows summed in position order."""
        u, s = current_builder().make("SumDuplicates", (self.indices, self.values))
        return IndexedSlices(u, s, self.dense_shape)

    def cast(self, dtype):
        return IndexedSlices(self.indices, ops_api.cast(self.values, dtype), self.dense_shape)

    def __repr__(self):
        return f"IndexedSlices(indices={self.indices}, values={self.values}, dense_shape={list(self.dense_shape)})"


def _consumers(graph):
    """node name -> [(consumer node, input position)] over data inputs."""
    out = {}
    for n in graph.nodes.values():
        for k, ref in enumerate(n.data_inputs):
            out.setdefault(parse_input(ref)[0], []).append((n, k))
    return out


def _gathers(b, var, consumers):
    """The Gather outputs through which the graph reads `var` (at the current level), or None when it
    reads it any other way (a dense gradient then)."""
    h = b.variables.get(id(var))
    if h is None or h.node not in b.graph.nodes or not var.shape:
        return None
    found = []
    for user, _ in consumers.get(h.node, []):
        if user.op in _UPDATES:
            continue
        if user.op != "ReadVariable":
            return None
        for g, k in consumers.get(user.name, []):
            t = b.tensors.get(g.name, [None])[0]
            if g.op != "Gather" or k != 0 or g.attrs.get("axis", 0) != 0 or t is None or t.ctx is not b.ctx:
                return None
            found.append((t, b.tensors[parse_input(g.data_inputs[1])[0]][parse_input(g.data_inputs[1])[1]]))
    return found or None


def sparse_gradients(loss, var_list):
    """dfc.gradients(loss, var_list), except that a Variable read only by gathers (along axis 0, at this
    level) gets an IndexedSlices (None if loss does not depend on it)."""
    b = current_builder()
    consumers = _consumers(b.graph)
    plan, xs = [], []
    for v in var_list:
        rows = _gathers(b, v, consumers) if isinstance(v, Variable) else None
        plan.append(rows)
        xs.extend([t for t, _ in rows] if rows else [v])
    grads = iter(gradients(loss, xs))
    out = []
    for v, rows in zip(var_list, plan):
        if not rows:
            out.append(next(grads))
            continue
        n, row = v.shape[0], list(v.shape[1:])
        idx, vals = [], []
        for (_, i), g in zip(rows, [next(grads) for _ in rows]):
            if g is not None:
                # a negative index counts from the end (Gather checked the range): the row it names
                idx.append(ops_api.mod(ops_api.reshape(ops_api.cast(i, "int64"), [-1]), n))
                vals.append(ops_api.reshape(g, [-1] + row))
        if not idx:
            out.append(None)
            continue
        one = len(idx) == 1
        out.append(IndexedSlices(idx[0] if one else ops_api.concat(idx), vals[0] if one else ops_api.concat(vals),
                                 v.shape))
    return out
