"""The kernel table: op name -> factory(node, xp) -> kernel(ctx, args) -> tuple of outputs.

Kernels are written against an array module `xp` (numpy, or cupy on a GPU)
so the same kernel runs on both. They never see dead values: the executor
skips a kernel whose inputs are dead (Figure 5). The ops the executor itself
implements (OpDef.in_executor: Switch, Merge, Enter, Exit, NextIteration,
Send, Recv) have no kernel.
"""
from dfc.runtime.kernels.registry import KERNELS, kernel_for
from dfc.runtime.kernels import math_kernels, array_kernels, state_kernels  # noqa: F401
from dfc.runtime.kernels import grad_kernels  # noqa: F401
from dfc.runtime.kernels import progress_kernels, summary_kernels  # noqa: F401
from dfc.runtime.kernels import numpy_kernels, linalg_kernels  # noqa: F401
from dfc.runtime.kernels import queue_kernels  # noqa: F401
from dfc.runtime.kernels import sparse_kernels  # noqa: F401

__all__ = ["KERNELS", "kernel_for"]
