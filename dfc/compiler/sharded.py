"""Sharded Variables: an embedding table's rows split over several devices or ps tasks.

    table = dfc.sharded_variable(init, 2, devices=["ps:0/cpu:0", "ps:1/cpu:0"], name="emb")
    rows = dfc.embedding_lookup(table, ids)      # == np.take(init, ids, axis=0), each id from its shard
    opt.minimize(loss, table.shards + [w])       # each shard gets a sparse (local rows) update

As TensorFlow's fixed_size_partitioner + PartitionedVariable + embedding_lookup (partition_strategy
"div"): shard k holds a contiguous block of rows, the first `rows % num_shards` blocks one row longer.
The lookup partitions the ids by shard (DynamicPartition), gathers each part on its shard's device and
puts the rows back in the ids' order (DynamicStitch). Each shard Variable is read only through that
gather, so its gradient is rows at local indices (dfc.sparse_gradients) and the optimizer's update runs
on the shard's device: only the looked-up rows cross between tasks, never a whole table.
"""
import contextlib

import numpy as np

from dfc.compiler import ops_api
from dfc.compiler.api import device as device_scope
from dfc.compiler.tracing import current_builder, user_location
from dfc.compiler.variables import Variable
from dfc.errors import DfcError


class ShardedVariable:
    """Rows of one table in `len(shards)` Variables (see the module docstring); `numpy()` is the table."""

    def __init__(self, shards, offsets, name):
        self.shards, self.offsets, self.name = list(shards), list(offsets), name

    @property
    def shape(self):
        return (self.offsets[-1],) + self.shards[0].shape[1:]

    @property
    def dtype(self):
        return self.shards[0].dtype

    def numpy(self):
        return np.concatenate([v.numpy() for v in self.shards])

    def __repr__(self):
        return f"<dfc.ShardedVariable {self.name!r} {self.dtype}{list(self.shape)} in {len(self.shards)} shards>"


def sharded_variable(initial_value, num_shards, devices=None, name="sharded", dtype=None):
    """A table of `initial_value`'s rows split into num_shards contiguous blocks (np.array_split), shard k a
    dfc.Variable named f"{name}_part_{k}" on devices[k] (default: the current device)."""
    init = np.asarray(initial_value, dtype=dtype)
    num_shards = int(num_shards)
    if init.ndim < 1 or not 1 <= num_shards <= init.shape[0]:
        raise DfcError(f"sharded_variable needs a value of rank >= 1 and 1 <= num_shards <= its {init.shape[:1]} "
                       f"rows, got shape {list(init.shape)} and num_shards={num_shards}", loc=user_location())
    if devices is not None and len(devices) != num_shards:
        raise DfcError(f"sharded_variable: {len(devices)} devices for {num_shards} shards", loc=user_location())
    parts = np.array_split(init, num_shards)
    shards = [Variable(p, name=f"{name}_part_{k}", device=None if devices is None else devices[k])
              for k, p in enumerate(parts)]
    return ShardedVariable(shards, np.cumsum([0] + [len(p) for p in parts]).tolist(), name)


def fixed_size_partitioner(num_shards):
    """TensorFlow's name for the split sharded_variable makes: a function (initial_value, devices, name) ->
    ShardedVariable of num_shards blocks."""
    return lambda initial_value, devices=None, name="sharded": sharded_variable(initial_value, num_shards,
                                                                                devices, name)


def embedding_lookup(params, ids):
    """params[ids] along axis 0: params a Variable, a tensor or a ShardedVariable (each id's row gathered on
    its shard's device). Ids outside [0, rows) of a ShardedVariable are a DfcRuntimeError."""
    if not isinstance(params, ShardedVariable):
        value = params.read_value() if isinstance(params, Variable) else params
        return ops_api.gather(value, ids)
    if current_builder(required=False) is None:
        return np.take(params.numpy(), np.asarray(ids), axis=0)
    ids = ops_api.cast(ids, "int64")
    flat = ops_api.reshape(ids, [-1])
    n = len(params.shards)
    # shard of each id: how many block starts it has passed; out of range ids get a partition outside
    # [0, n) (DynamicPartition then fails, naming its node) instead of a wrong row
    shard = ops_api.cast(flat < 0, "int64") * np.int64(-n - 1)
    for start in params.offsets[1:]:
        shard = shard + ops_api.cast(flat >= start, "int64")
    local = flat - ops_api.gather(ops_api.constant(np.array(params.offsets, np.int64)), ops_api.maximum(
        ops_api.minimum(shard, np.int64(n - 1)), np.int64(0)))
    b = current_builder()
    ids_of = b.make("DynamicPartition", (local, shard), {"num_partitions": n})
    where = b.make("DynamicPartition", (ops_api.range(ops_api.size(flat)), shard), {"num_partitions": n})
    rows = []
    for v, part in zip(params.shards, ids_of):
        with device_scope(str(v.device)) if v.device else contextlib.nullcontext():
            rows.append(ops_api.gather(v.read_value(), part))
    out = b.make1("DynamicStitch", tuple(where) + tuple(rows))
    row = list(params.shape[1:])
    if ids.shape is not None and len(ids.shape) == 1:
        return ops_api.reshape(out, [-1] + row)
    return ops_api.reshape(out, ops_api.concat([ops_api.shape(ids), ops_api.constant(np.array(row, np.int64))]))
