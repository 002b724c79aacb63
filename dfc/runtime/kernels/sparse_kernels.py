"""Sparse row updates: a gather's gradient applied to a Variable as (indices, rows), not as a dense table."""
import numpy as np

from dfc.errors import DfcRuntimeError
from dfc.runtime.kernels.registry import host, kernel
from dfc.runtime.kernels.state_kernels import scattered


@kernel("ResourceScatterAdd", "ResourceScatterSub")
def _scatter_variable(node, xp):
    def f(ctx, a):
        res, idx, upd = a[0], xp.asarray(a[1]), xp.asarray(a[2])
        with res.lock:
            old = res.value
            if old.ndim == 0:
                raise DfcRuntimeError(f"{node.op}: variable {res.name!r} is a scalar; it has no rows",
                                      node=node.name)
            want = tuple(idx.shape) + tuple(old.shape[1:])
            if upd.dtype != old.dtype or tuple(upd.shape) != want:
                raise DfcRuntimeError(f"{node.op}: updates {upd.dtype}{list(upd.shape)} for variable {res.name!r} "
                                      f"of {old.dtype}{list(old.shape)} at indices of shape {list(idx.shape)} "
                                      f"(want {old.dtype}{list(want)})", node=node.name)
            res.value = scattered(xp, res, idx, upd, node.op, node.name)
            return (xp.take(res.value, idx, axis=0),)
    return f


@kernel("SumDuplicates")
def _sum_duplicates(node, xp):
    def f(ctx, a):
        idx, vals = host(a[0]), host(a[1])
        if vals.ndim == 0 or vals.shape[0] != idx.shape[0]:
            raise DfcRuntimeError(f"SumDuplicates: {idx.shape[0]} indices for values of shape {list(vals.shape)}",
                                  node=node.name)
        unique, inverse = np.unique(idx, return_inverse=True)
        sums = np.zeros((unique.shape[0],) + vals.shape[1:], vals.dtype)
        np.add.at(sums, inverse.reshape(-1), vals)      # in position order, as ScatterAdd adds them
        return (xp.asarray(unique.astype(idx.dtype)), xp.asarray(sums))
    return f


@kernel("DynamicPartition")
def _dynamic_partition(node, xp):
    n = node.attrs["num_partitions"]

    def f(ctx, a):
        data, parts = xp.asarray(a[0]), xp.asarray(a[1])
        if tuple(data.shape[:parts.ndim]) != tuple(parts.shape):
            raise DfcRuntimeError(f"DynamicPartition: partitions of shape {list(parts.shape)} for data of shape "
                                  f"{list(data.shape)}", node=node.name)
        p = host(parts)
        if p.size and (p.min() < 0 or p.max() >= n):
            raise DfcRuntimeError(f"DynamicPartition: partition {int(p.min() if p.min() < 0 else p.max())} "
                                  f"outside [0, {n})", node=node.name)
        flat = data.reshape((-1,) + tuple(data.shape[parts.ndim:]))
        p = p.reshape(-1)
        return tuple(flat[xp.asarray(np.flatnonzero(p == k))] for k in range(n))
    return f


@kernel("DynamicStitch")
def _dynamic_stitch(node, xp):
    def f(ctx, a):
        n = len(a) // 2
        idx, data = [host(i).reshape(-1) for i in a[:n]], [xp.asarray(d) for d in a[n:]]
        row = tuple(data[0].shape[len(a[0].shape):])
        rows = 1 + max((int(i.max()) for i in idx if i.size), default=-1)
        if any(i.size and i.min() < 0 for i in idx):
            raise DfcRuntimeError("DynamicStitch: a negative index", node=node.name)
        out = xp.zeros((rows,) + row, data[0].dtype)
        for i, d, ai in zip(idx, data, a[:n]):
            if tuple(d.shape) != tuple(ai.shape) + row:
                raise DfcRuntimeError(f"DynamicStitch: data of shape {list(d.shape)} for indices of shape "
                                      f"{list(ai.shape)} and rows {list(row)}", node=node.name)
            out[xp.asarray(i)] = d.reshape((-1,) + row)
        return (out,)
    return f
