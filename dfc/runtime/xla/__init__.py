"""Prototype: a whole run of a graph lowered to XLA through jax.jit (loop frames -> lax.while_loop,
gradient stacks -> preallocated buffers re-run larger when a loop outruns them, Variables in and out).

JAX is optional: nothing here is imported until `to_jax` is called. dfc traces, compiles and runs its
programs with 64-bit types (dfc computes in float64 and int64 where the graph says so) inside
`jax.enable_x64(True)`, which holds for the calling thread only: the user's own JAX code in the same
process keeps JAX's defaults.
"""


def to_jax(graph, fetches=None, feed_names=None, targets=()):
    """An XlaProgram (dfc/runtime/xla/program.py) for `graph`'s signature: call it like the graph.
    Raises NotLowerable (a DfcGraphError) naming the node when the prototype cannot express the graph."""
    try:
        import jax
    except ImportError as e:
        from dfc.errors import DfcError
        raise DfcError("the XLA prototype needs jax (pip install 'jax[cpu]')") from e
    from dfc.runtime.xla.program import XlaProgram
    return XlaProgram(graph, fetches, feed_names, targets)
