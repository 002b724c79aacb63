"""The five programs of the earlier study (benchmarks/ode.py, hmc.py, gru.py, fixed_point.py, lstm.py) as
research-benchmark cases: the same dfc functions, inputs and competitor versions, called in the
default mode."""
import numpy as np

from benchmarks import fixed_point, gru, hmc, ode
from benchmarks.research.case import Case


def _np(v):
    return [np.asarray(x) for x in v] if isinstance(v, (list, tuple)) else np.asarray(v)


def _ode(size):
    a = ode.inputs(10.0 if size == "bench" else 0.3)

    def jax_part(k):
        def build():
            parts = ode._jax()
            return lambda: _np(parts[0].block_until_ready(parts[k](*a)))
        return build

    def torch_fwd():
        torch, f = ode._torch()
        ta = [torch.tensor(v) for v in a]
        return lambda: f(*ta).numpy()

    def torch_grad():
        torch, f = ode._torch()

        def run():
            y0, mu = torch.tensor(a[0], requires_grad=True), torch.tensor(a[1], requires_grad=True)
            y = f(y0, mu, torch.tensor(a[2]), torch.tensor(a[3]))
            return [g.numpy() for g in torch.autograd.grad(y.sum(), [y0, mu])]
        return run

    def check_grad():
        _, dy0, dmu = ode.ode_gradient(*a)
        return [("dfc gradient vs JAX jacfwd", jax_part(3)()(), [dy0, dmu])]
    desc = f"Van der Pol, Heun-Euler with accept/reject to t_end={a[2]:g}, tol=1e-4, float64"
    return [Case("ode_forward", "adaptive-step ODE, forward: " + desc, lambda: ode.ode_forward(*a),
                 lambda: ode.numpy_forward(*a), jax_part(1), torch_fwd,
                 lambda: [("dfc vs numpy", ode.numpy_forward(*a), ode.ode_forward(*a))], 1e-9, 1e-12),
            Case("ode_gradient", "adaptive-step ODE, gradient of sum(y) wrt y0 and mu: " + desc,
                 lambda: ode.ode_gradient(*a), None, jax_part(3), torch_grad, check_grad, 1e-7, 1e-10,
                 numpy_note="no hand-written adjoint", jax_note="jacfwd (reverse mode refuses while_loop)")]


def _hmc(size):
    a = hmc.inputs(300 if size == "bench" else 4)
    return [Case("hmc", f"HMC, d={hmc.D}, {len(a[2])} samples, random leapfrog lengths 1..19, float64",
                 lambda: hmc.hmc(*a), lambda: hmc.numpy_hmc(*a), lambda: (lambda f: lambda: f(*a))(hmc._jax_hmc()),
                 lambda: (lambda f: lambda: f(*a))(hmc._torch_hmc()),
                 lambda: [("dfc vs numpy", hmc.numpy_hmc(*a), hmc.hmc(*a))], 1e-8, 1e-10,
                 note="draws are inputs (the earlier study's program)")]


def _gru(size):
    a = gru.inputs()
    return [Case("gru", f"GRU classifier training step, T={gru.T} B={gru.B} H={gru.H}, variable lengths, float32",
                 lambda: gru.gru_step(*a), None, lambda: (lambda f: lambda: f(*a))(gru._jax()),
                 lambda: (lambda f: lambda: f(*a))(gru._torch()),
                 lambda: [("dfc vs JAX", gru._jax()(*a), gru.gru_step(*a))], 2e-4, 1e-6,
                 numpy_note="no hand-written GRU BPTT")]


def _fixed(size):
    a = fixed_point.inputs()

    def jax_part(k):
        def build():
            parts = fixed_point._jax()
            return lambda: _np(parts[0].block_until_ready(parts[k](*a)))
        return build

    def torch_fwd():
        import torch
        ta = [torch.tensor(v) for v in a]
        return lambda: fixed_point._torch_solve(torch, *ta).numpy()

    def torch_grad():
        import torch

        def run():
            W, b = torch.tensor(a[0], requires_grad=True), torch.tensor(a[1], requires_grad=True)
            x = fixed_point._torch_solve(torch, W, b, torch.tensor(a[2]))
            return [g.numpy() for g in torch.autograd.grad(x.sum(), [W, b])]
        return run

    def check_grad():
        _, dW, db = fixed_point.fixed_point_gradient(*a)
        return [("dfc gradient vs JAX jacfwd", jax_part(3)()(), [dW, db])]
    desc = f"x = tanh(W x + b) until the update < 1e-10, d={fixed_point.D}, float64"
    return [Case("fixed_point_forward", "fixed point, forward: " + desc, lambda: fixed_point.fixed_point(*a),
                 lambda: fixed_point.numpy_solve(*a), jax_part(1), torch_fwd,
                 lambda: [("dfc vs numpy", fixed_point.numpy_solve(*a), fixed_point.fixed_point(*a))], 1e-9, 1e-12),
            Case("fixed_point_gradient", "fixed point, gradient of sum(x*) wrt W and b: " + desc,
                 lambda: fixed_point.fixed_point_gradient(*a), None, jax_part(3), torch_grad, check_grad, 1e-7, 1e-10,
                 numpy_note="no hand-written adjoint", jax_note="jacfwd (reverse mode refuses while_loop)")]


def _lstm(size):
    from benchmarks import lstm
    from benchmarks.lstm_problem import SIZES, make_inputs, numpy_loss_and_grads
    cfg = SIZES["small"] if size == "bench" else dict(H=4, B=2, T=5)
    x, W, b = make_inputs(**cfg)
    graph = []

    def dfc_call():         # the graph built by dfc.trace, called as a function (the default Session)
        if not graph:
            graph.append(lstm.build(cfg["H"], cfg["B"], cfg["T"]))
        return graph[0](x, W, b)

    def jax_step():
        from benchmarks.competitors.jax_bench import jax, lstm_value_and_grad
        f = lstm_value_and_grad(cfg["H"], cfg["B"])

        def run():
            loss, (dW, db) = jax.block_until_ready(f(W, b, x))
            return np.asarray(loss), np.asarray(dW), np.asarray(db)
        return run

    def torch_step():
        from benchmarks.competitors.torch_bench import lstm_step
        step = lstm_step(x, W, b)
        return lambda: [g.numpy() for g in step()]
    return [Case("lstm", f"LSTM training step (while_loop + gradients), H={cfg['H']} B={cfg['B']} T={cfg['T']}, "
                         "float32", dfc_call, lambda: numpy_loss_and_grads(x, W, b), jax_step, torch_step,
                 lambda: [("dfc vs numpy (hand-written BPTT)", numpy_loss_and_grads(x, W, b), dfc_call())],
                 2e-4, 1e-4)]


def cases(size="bench"):
    return _ode(size) + _hmc(size) + _gru(size) + _fixed(size) + _lstm(size)
