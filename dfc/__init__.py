"""dfc: dynamic control flow for machine learning.

Re-exports are lazy (module __getattr__) so that `import dfc` is cheap and
`dfc run` never imports dfc.compiler or gast.
"""
import importlib

from dfc.errors import (DfcError, DfcGraphError, DfcTypeError, DfcConversionError, DfcRuntimeError,  # noqa: F401
                        DfcAssertionError, DfcDeadlockError, DfcInputError, DfcOutOfMemory, DfcIndexError,
                        DfcQueueClosed, DfcQueueTimeout)

from dfc.traceback_filter import api_boundary

__version__ = "0.1.0"

_OPS = ("constant add subtract multiply divide floordiv mod pow maximum minimum negative abs sign square sqrt "
        "rsqrt exp log log1p sin cos tanh sigmoid relu floor ceil round reciprocal less less_equal greater "
        "greater_equal equal not_equal logical_and logical_or logical_not isfinite identity stop_gradient cast "
        "matmul reduce_sum reduce_mean reduce_max reduce_min reduce_prod reduce_all reduce_any argmax argmin "
        "reshape transpose expand_dims squeeze concat stack unstack split gather where shape size rank fill zeros "
        "ones zeros_like ones_like broadcast_to range softmax log_softmax one_hot random_uniform random_normal "
        "print Assert clip timestamp").split()

_LAZY = {name: ("dfc.compiler.ops_api", name) for name in _OPS}
_NUMPY = ("full arange linspace repeat tile flip roll outer argsort searchsorted sort top_k take_along_axis cumsum cumprod "
          "einsum pad isnan isinf inf nan pi e newaxis eye tril triu diagonal").split()
_LAZY.update({name: ("dfc.compiler.numpy_api", name) for name in _NUMPY})
_LAZY["linalg"] = ("dfc.compiler.linalg", None)
_LAZY.update({
    "Graph": ("dfc.ir.graph", "Graph"), "Node": ("dfc.ir.graph", "Node"),
    "save": ("dfc.ir.serialize", "save"), "load": ("dfc.ir.serialize", "load"), "loads": ("dfc.ir.serialize", "loads"),
    "Session": ("dfc.runtime.session", "Session"),
    "RunOptions": ("dfc.runtime.options", "RunOptions"),
    "Tensor": ("dfc.compiler.tracing", "Tensor"), "TensorSpec": ("dfc.compiler.tracing", "TensorSpec"),
    "trace": ("dfc.compiler.api", "trace"), "device": ("dfc.compiler.api", "device"),
    "control_dependencies": ("dfc.compiler.control_deps", "control_dependencies"),
    "cond": ("dfc.compiler.control_flow", "cond"), "while_loop": ("dfc.compiler.control_flow", "while_loop"),
    "TensorArray": ("dfc.compiler.tensor_array", "TensorArray"),
    "Variable": ("dfc.compiler.variables", "Variable"),
    "FIFOQueue": ("dfc.compiler.queues", "FIFOQueue"),
    "ConditionalAccumulator": ("dfc.compiler.queues", "ConditionalAccumulator"),
    "CounterBarrier": ("dfc.compiler.queues", "CounterBarrier"),
    "scan": ("dfc.compiler.functional", "scan"), "map_fn": ("dfc.compiler.functional", "map_fn"),
    "foldl": ("dfc.compiler.functional", "foldl"),
    "function": ("dfc.compiler.autograph", "function"),
    "gradients": ("dfc.compiler.autodiff", "gradients"),
    "jvp": ("dfc.compiler.autodiff.forward", "jvp"),
    "value_and_grad": ("dfc.compiler.autodiff", "value_and_grad"),
    "hessian": ("dfc.compiler.autodiff.higher", "hessian"),
    "hvp": ("dfc.compiler.autodiff.higher", "hvp"),
    "custom_gradient": ("dfc.compiler.autodiff.custom_gradient", "custom_gradient"),
    "recompute_grad": ("dfc.compiler.autodiff.recompute", "recompute_grad"),
    "gradient_memory": ("dfc.compiler.autodiff.recompute", "gradient_memory"),
    "train": ("dfc.compiler.train", None),
    "IndexedSlices": ("dfc.compiler.sparse", "IndexedSlices"),
    "sparse_gradients": ("dfc.compiler.sparse", "sparse_gradients"),
    "sharded_variable": ("dfc.compiler.sharded", "sharded_variable"),
    "embedding_lookup": ("dfc.compiler.sharded", "embedding_lookup"),
    "fixed_size_partitioner": ("dfc.compiler.sharded", "fixed_size_partitioner"),
    "nest": ("dfc.nest", None),
    "config": ("dfc.config", None),
    "containers": ("dfc.runtime.containers", None),
    "cluster": ("dfc.runtime.cluster", None),
    "DfcTraceTimeRandomWarning": ("dfc.compiler.autograph.errors", "DfcTraceTimeRandomWarning"),
    "Checkpoint": ("dfc.compiler.checkpoint", "Checkpoint"),
    "progress": ("dfc.compiler.progress", "progress"), "summary": ("dfc.compiler.summary", None),
})
# numpy-style aliases
_ALIASES = {"sum": "reduce_sum", "mean": "reduce_mean", "max": "reduce_max", "min": "reduce_min",
            "prod": "reduce_prod", "all": "reduce_all", "any": "reduce_any", "concatenate": "concat",
            "absolute": "abs", "power": "pow"}


@api_boundary
def run(graph, *args, **kwargs):
    """Run a Graph with its inputs (same as graph(*args)), in the one Session cached for the graph."""
    from dfc.runtime.session import session_for
    return session_for(graph).call(*args, **kwargs)


def __getattr__(name):
    name2 = _ALIASES.get(name, name)
    if name2 in _LAZY:
        mod, attr = _LAZY[name2]
        m = importlib.import_module(mod)
        value = m if attr is None else getattr(m, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dfc' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_ALIASES))
