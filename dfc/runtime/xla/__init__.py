"""Prototype: a whole run of a graph lowered to XLA through jax.jit (loop frames -> lax.while_loop,
gradient stacks -> preallocated buffers re-run larger when a loop outruns them, Variables in and out).

JAX is optional: nothing here is imported until `to_jax` is called. It then sets two JAX options for the
whole process: 64-bit types (dfc computes in float64 and int64 where the graph says so), and synchronous
CPU dispatch (a dfc call waits for its results anyway; handing each run to XLA's worker thread and back
cost up to milliseconds per call on a loaded 2-core machine).
"""


def to_jax(graph):
    """An XlaProgram (dfc/runtime/xla/program.py) for `graph`'s signature: call it like the graph.
    Raises NotLowerable (a DfcGraphError) naming the node when the prototype cannot express the graph."""
    try:
        import jax
    except ImportError as e:
        from dfc.errors import DfcError
        raise DfcError("the XLA prototype needs jax (pip install 'jax[cpu]')") from e
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    from dfc.runtime.xla.program import XlaProgram
    return XlaProgram(graph)
