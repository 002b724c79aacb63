"""Sparse row updates: a gather's gradient applied to a Variable as (indices, rows), not as a dense table."""
import numpy as np

from dfc.errors import DfcRuntimeError
from dfc.runtime.kernels.array_kernels import check_indices
from dfc.runtime.kernels.registry import host, kernel


@kernel("ResourceScatterAdd", "ResourceScatterSub")
def _scatter_variable(node, xp):
    negate = node.op == "ResourceScatterSub"

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
            check_indices(xp, idx, old.shape[0], node.op)
            new = old.copy()          # stored values are read-only: whoever fetched the old one keeps it
            # a - b is a + (-b) exactly in IEEE arithmetic, so Sub is Add of the negated rows
            xp.add.at(new, idx, -upd if negate else upd)
            if isinstance(new, np.ndarray):
                new.flags.writeable = False
            res.value = new
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
