"""Reverse-mode automatic differentiation (§5.1-5.2 of the paper).

`gradients(ys, xs)` adds the gradient subgraph to the graph being built;
`value_and_grad(fn)` wraps a function. See gradients.py for the sweep,
op_grads.py for the per-op table, control_flow_grad.py for cond/while_loop,
tensor_array_grad.py for TensorArrays, custom_gradient.py for `dfc.custom_gradient`.
"""
from dfc.compiler.autodiff.gradients import gradients, value_and_grad

__all__ = ["gradients", "value_and_grad"]
