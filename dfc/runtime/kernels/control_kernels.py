"""Kernels of the control-flow primitives.

The executor implements Switch, Merge, Enter, Exit and NextIteration itself
(they move values between frames); these kernels give their value rules so
the kernel table is complete and a reader finds every op here.
"""
from dfc.runtime.kernels.registry import kernel


@kernel("Switch")
def _switch(node, xp):
    # (output_false, output_true); the executor marks the untaken one dead.
    return lambda ctx, a: (a[0], a[0])


@kernel("Merge")
def _merge(node, xp):
    return lambda ctx, a: (a[0], xp.asarray(0, dtype="int32"))


@kernel("Send", "Recv")
def _transfer(node, xp):
    # The executor implements both (they talk to the run's rendezvous, asynchronously for Recv).
    def f(ctx, a):
        raise RuntimeError(f"{node.op} runs only inside a partitioned run")
    return f
