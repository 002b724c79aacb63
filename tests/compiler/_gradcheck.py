"""Helpers for gradient tests: central finite differences in float64 and a graph runner."""
import os

import numpy as np

import dfc
from dfc.runtime.session import Session
from tests.conftest import run_all_modes


def mode():
    return os.environ.get("DFC_EXECUTOR", "threads")


def build(fn, *specs, wrt=None):
    """Trace x -> (fn(*x), gradients(fn(*x), x[wrt])); the graph with its gradients must verify."""
    def traced(*args):
        y = fn(*args)
        xs = [args[i] for i in (range(len(args)) if wrt is None else wrt)]
        return y, dfc.gradients(y, xs)
    g = dfc.trace(traced, *specs)
    g.verify()
    return g


def run(graph, *args):
    """Run on every execution path of the conftest matrix (all must agree); the reference's result."""
    return run_all_modes(graph, *args)


def numeric_grad(f, args, k, eps=1e-6):
    """d sum(f(*args)) / d args[k] by central differences."""
    args = [np.array(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a) for a in args]
    x = args[k]
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape if x.shape else ()):
        saved = x[i].copy() if x.shape else x.copy()
        x[i] = saved + eps
        hi = np.sum(f(*args))
        x[i] = saved - eps
        lo = np.sum(f(*args))
        x[i] = saved
        out[i] = (hi - lo) / (2 * eps)
    return out


def check(fn, *args, wrt=None, rtol=1e-5, atol=1e-6, specs=None):
    """Compare dfc.gradients of fn at args with finite differences of the same graph's value."""
    specs = specs or [dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args]
    g = build(fn, *specs, wrt=wrt)
    value, grads = run_all_modes(g, *args)          # every execution path gives the same gradients
    sess = Session(g, mode=mode())
    ks = list(range(len(args))) if wrt is None else list(wrt)
    for k, got in zip(ks, grads):
        want = numeric_grad(lambda *a: sess.call(*a)[0], list(args), k)
        got = np.zeros_like(want) if got is None else got
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"gradient w.r.t. argument {k}")
    return value, grads
