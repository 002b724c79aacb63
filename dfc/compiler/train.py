"""Optimizers: build variable updates (Assign/AssignAdd/AssignSub) into the graph being traced.

A training step is then one graph, and a whole training loop can be an
in-graph dfc.while_loop whose body calls `opt.minimize(loss_fn(), var_list)`
(updates are side effects, ordered in program order in every iteration).

    opt = dfc.train.Adam(0.01)
    def step(x, y):
        loss = ...                                  # reads the variables
        opt.minimize(loss, [w, b])                  # gradients + update ops
        return loss
"""
import contextlib

import numpy as np

from dfc.compiler import ops_api
from dfc.compiler.api import device as device_scope
from dfc.compiler.sparse import IndexedSlices, sparse_gradients
from dfc.compiler.tracing import Tensor, user_location
from dfc.compiler.variables import Variable
from dfc.errors import DfcError


class Optimizer:
    """Base class: `minimize` = `compute_gradients` + `apply_gradients`.

    learning_rate is a number, a scalar tensor, or a schedule: a function of the global step (an int64
    tensor) returning the rate, e.g. `dfc.train.exponential_decay(0.5, 100, 0.9)`; a schedule needs
    `global_step=` (a Variable or tensor) in minimize/apply_gradients, read when the update runs.
    """

    def __init__(self, learning_rate):
        self.learning_rate = learning_rate
        self._schedule = learning_rate if callable(learning_rate) else None
        self._slots = {}

    def compute_gradients(self, loss, var_list):
        """[(gradient or None, variable)] of loss with respect to each variable. A Variable that loss reads
        only through row gathers gets its gradient as rows: a dfc.IndexedSlices (see dfc/compiler/sparse.py)."""
        var_list = list(var_list)
        return list(zip(sparse_gradients(loss, var_list), var_list))

    def minimize(self, loss, var_list, global_step=None):
        """Build the update of every variable in var_list from the gradient of loss; return the new values."""
        return self.apply_gradients(self.compute_gradients(loss, var_list), global_step=global_step)

    def apply_gradients(self, grads_and_vars, global_step=None):
        """Build one update per (gradient, variable) pair (pairs with a None gradient are skipped).
        global_step: the step a learning-rate schedule reads (required when there is one)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if self._schedule is not None:
            if global_step is None:
                raise DfcError("this optimizer's learning_rate is a schedule (a function of the step): pass "
                               "global_step= (a Variable or tensor) to minimize / apply_gradients",
                               loc=user_location())
            step = global_step.read_value() if isinstance(global_step, Variable) else ops_api.convert(global_step)
            self.learning_rate = self._schedule(step)
        try:
            self._prepare(pairs)
            return [self._apply_any(g, v) for g, v in pairs]
        finally:
            if self._schedule is not None:
                self.learning_rate = self._schedule

    def _apply_any(self, g, var):
        if not isinstance(g, IndexedSlices):
            return self._apply(ops_api.cast(g, var.dtype), var)
        if not self.sparse_updates:
            return self._apply(g.cast(var.dtype).dense(), var)
        # each row once, its gradients summed first: the rows' update is then the dense update's rows;
        # built on the Variable's device, so the raw rows cross to it once and the update stays there
        with device_scope(str(var.device)) if var.device else contextlib.nullcontext():
            return self._apply_sparse(g.cast(var.dtype).deduplicated(), var)

    # optimizers whose update leaves the rows of a zero gradient unchanged update only the touched rows
    sparse_updates = False

    def _apply_sparse(self, grad, var):
        raise NotImplementedError

    def _lr(self, dtype):
        """The learning rate as a number or a tensor of `dtype` (a schedule's rate is a tensor)."""
        lr = self.learning_rate
        return ops_api.cast(lr, dtype) if isinstance(lr, Tensor) else lr

    def _prepare(self, pairs):
        pass

    def _slot(self, var, name, init=0.0):
        key = (id(var), name)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = (var, Variable(np.full(var.shape, init, var.dtype), name=f"{var.name}_{name}",
                                                     device=getattr(var, "device", None)))   # beside its variable
        return slot[1]

    def _apply(self, grad, var):
        raise NotImplementedError


class SGD(Optimizer):
    """var -= learning_rate * grad (a sparse gradient: only its rows, var[rows] -= learning_rate * grad)."""
    sparse_updates = True

    def _apply(self, grad, var):
        return var.assign_sub(self._lr(var.dtype) * grad)

    def _apply_sparse(self, grad, var):
        return var.scatter_sub(grad.indices, self._lr(var.dtype) * grad.values)


class Adagrad(Optimizer):
    """accum += grad * grad; var -= learning_rate * grad / sqrt(accum) (TF's AdagradOptimizer; accum
    starts at initial_accumulator_value > 0). A sparse gradient updates only its rows of both, with the
    dense update's result (a zero gradient row changes neither)."""
    sparse_updates = True

    def __init__(self, learning_rate, initial_accumulator_value=0.1):
        if not initial_accumulator_value > 0:
            raise DfcError(f"Adagrad initial_accumulator_value must be > 0, got {initial_accumulator_value}",
                           loc=user_location())
        super().__init__(learning_rate)
        self.initial_accumulator_value = float(initial_accumulator_value)

    def _apply(self, grad, var):
        accum = self._slot(var, "accumulator", self.initial_accumulator_value)
        a = accum.assign_add(grad * grad)
        return var.assign_sub(self._lr(var.dtype) * grad / ops_api.sqrt(a))

    def _apply_sparse(self, grad, var):
        accum = self._slot(var, "accumulator", self.initial_accumulator_value)
        a = accum.scatter_add(grad.indices, grad.values * grad.values)
        return var.scatter_sub(grad.indices, self._lr(var.dtype) * grad.values / ops_api.sqrt(a))


class Momentum(Optimizer):
    """accum = momentum * accum + grad; var -= learning_rate * accum (TF's MomentumOptimizer).

    With nesterov=True: var -= learning_rate * (grad + momentum * accum).
    """

    def __init__(self, learning_rate, momentum=0.9, nesterov=False):
        super().__init__(learning_rate)
        self.momentum, self.nesterov = momentum, nesterov

    def _apply(self, grad, var):
        accum = self._slot(var, "momentum")
        a = accum.assign(self.momentum * accum.read_value() + grad)
        step = grad + self.momentum * a if self.nesterov else a
        return var.assign_sub(self._lr(var.dtype) * step)


class Adam(Optimizer):
    """Adam (Kingma & Ba), bias-corrected as in TF's AdamOptimizer:

        t += 1; lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t)
        m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
        var -= lr_t * m / (sqrt(v) + epsilon)
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(learning_rate)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self._step = None

    def _prepare(self, pairs):
        if self._step is None:
            self._step = Variable(np.zeros((), np.float64), name="adam_step",
                                  device=getattr(pairs[0][1], "device", None) if pairs else None)
        t = self._step.assign_add(np.float64(1.0))
        self._lr_t = self._lr("float64") * ops_api.sqrt(1 - ops_api.pow(self.beta2, t)) / \
            (1 - ops_api.pow(self.beta1, t))

    def _apply(self, grad, var):
        m, v = self._slot(var, "m"), self._slot(var, "v")
        m_new = m.assign(self.beta1 * m.read_value() + (1 - self.beta1) * grad)
        v_new = v.assign(self.beta2 * v.read_value() + (1 - self.beta2) * ops_api.square(grad))
        lr_t = ops_api.cast(self._lr_t, var.dtype)
        return var.assign_sub(lr_t * m_new / (ops_api.sqrt(v_new) + self.epsilon))


GradientDescent = SGD


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """A schedule (tf.train.exponential_decay): step -> learning_rate * decay_rate ** (step / decay_steps),
    the exponent floored when `staircase`. Give it as an optimizer's learning_rate, with global_step."""
    def schedule(step):
        p = ops_api.cast(step, "float64") / float(decay_steps)
        if staircase:
            p = ops_api.floor(p)
        return float(learning_rate) * ops_api.pow(float(decay_rate), p)
    return schedule


__all__ = ["Optimizer", "SGD", "GradientDescent", "Momentum", "Adagrad", "Adam", "exponential_decay"]


def __getattr__(name):
    if name == "DataParallel":      # data-parallel training on a cluster (dfc/compiler/data_parallel.py)
        from dfc.compiler.data_parallel import DataParallel
        return DataParallel
    raise AttributeError(f"module 'dfc.train' has no attribute {name!r}")
