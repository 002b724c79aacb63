"""Gradients through cond and while_loop vs finite differences (float64) and, where it can, JAX."""
import numpy as np
import pytest

import dfc
from _gradcheck import build, check, run

rng = np.random.default_rng(7)
F64 = "float64"


def jax_grad(fn, *args, argnums=0):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax.grad(lambda *a: jnp.sum(fn(*a)), argnums=argnums)(*args)


def test_loop_whose_trip_count_depends_on_x():
    def f(x):
        n = dfc.cast(dfc.reduce_sum(dfc.abs(x)) * 3.0, "int64")
        return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.9 + dfc.sin(s) * x), (0, x))[1]
    x = rng.normal(size=3)
    check(f, x)
    # the gradient loop runs as often as the forward loop: compare with the unrolled Python loop
    n = int(np.sum(np.abs(x)) * 3.0)

    def unrolled(x):
        s = x
        for _ in range(n):
            s = s * 0.9 + dfc.sin(s) * x
        return s
    _, (want,) = run(build(unrolled, dfc.TensorSpec([3], F64)), x)
    _, (got,) = run(build(f, dfc.TensorSpec([3], F64)), x)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_loop_until_value_converges():
    # trip count depends on the data in the loop variable itself (JAX cannot reverse this loop)
    def f(x):
        return dfc.while_loop(lambda s: dfc.reduce_sum(s) < 10.0, lambda s: s * 1.3 + 0.1, x)
    check(f, np.array([0.5, 0.7]))


@pytest.mark.parametrize("x0", [0.8, -0.8])
def test_cond(x0):
    def f(x, w):
        return dfc.cond(dfc.reduce_sum(x) > 0, lambda: dfc.sin(x) * w, lambda: x * x * w + w)
    x, w = np.array([x0, 0.3]), np.array([1.5, -0.5])
    _, (gx, gw) = check(f, x, w)
    import_jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    jf = lambda x, w: import_jax.lax.cond(jnp.sum(x) > 0, lambda: jnp.sin(x) * w, lambda: x * x * w + w)
    np.testing.assert_allclose(gx, jax_grad(jf, x, w), rtol=1e-10)
    np.testing.assert_allclose(gw, jax_grad(jf, x, w, argnums=1), rtol=1e-10)


def test_cond_with_untouched_input_gives_zeros_in_that_branch():
    def f(x, y):
        return dfc.cond(dfc.reduce_sum(x) > 0, lambda: x * 2.0, lambda: y * 3.0)
    check(f, np.array([1.0]), np.array([2.0]))
    check(f, np.array([-1.0]), np.array([2.0]))


def test_cond_inside_loop_pushes_its_predicate():
    def f(x):
        def body(i, s):
            s2 = dfc.cond(dfc.reduce_sum(s) > 1.0, lambda: s * 0.5, lambda: dfc.sin(s) * 2.0 + s)
            return i + 1, s2
        return dfc.while_loop(lambda i, s: i < 6, body, (0, x))[1]
    x = np.array([0.3, 0.4])
    _, (gx,) = check(f, x)
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    def jf(x):
        def body(i, s):
            return jax.lax.cond(jnp.sum(s) > 1.0, lambda: s * 0.5, lambda: jnp.sin(s) * 2.0 + s)
        return jax.lax.fori_loop(0, 6, body, x)
    np.testing.assert_allclose(gx, jax_grad(jf, x), rtol=1e-10)
    g = build(f, dfc.TensorSpec([2], F64))
    pushes = [n for n in g.nodes.values() if n.op == "StackPush"]
    assert any(g.nodes[n.inputs[1].split(":")[0]].op == "Greater" for n in pushes)


def test_nested_loops_with_different_inner_trip_counts():
    def f(x):
        def outer(i, s):
            inner = dfc.while_loop(lambda j, t: j < i + 1, lambda j, t: (j + 1, dfc.sin(t) * x + t * 0.5),
                                   (0, s))[1]
            return i + 1, inner
        return dfc.while_loop(lambda i, s: i < 4, outer, (0, x))[1]
    check(f, rng.normal(size=3))


def test_nested_loop_trip_count_from_data_and_cond_in_inner_loop():
    def f(x, ns):
        def outer(i, s):
            def ib(j, t):
                return j + 1, dfc.cond(t[0] > 0, lambda: t * x, lambda: t - x * x)
            return i + 1, dfc.while_loop(lambda j, t: j < ns[i], ib, (0, s))[1]
        return dfc.while_loop(lambda i, s: i < dfc.shape(ns)[0], outer, (0, x))[1]
    check(f, np.array([0.9, -0.4]), np.array([2, 0, 3]), wrt=[0])


@pytest.mark.parametrize("taken", [True, False])
def test_loop_inside_cond(taken):
    def f(x, p):
        def tb():
            return dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, dfc.tanh(s) * x + 0.5), (0, x))[1]
        return dfc.cond(p > 0, tb, lambda: x * 2.0)
    check(f, np.array([0.4, -0.9]), np.float64(1.0 if taken else -1.0), wrt=[0])


def test_grads_wrt_loop_invariants_and_initial_values():
    W, h0 = rng.normal(size=(3, 3)) * 0.6, rng.normal(size=(2, 3))

    def f(W, h0):
        return dfc.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, dfc.tanh(h @ W)), (0, h0))[1]
    _, (gW, gh0) = check(f, W, h0)
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    jf = lambda W, h0: jax.lax.fori_loop(0, 4, lambda i, h: jnp.tanh(h @ W), h0)
    np.testing.assert_allclose(gW, jax_grad(jf, W, h0), rtol=1e-9)
    np.testing.assert_allclose(gh0, jax_grad(jf, W, h0, argnums=1), rtol=1e-9)


def test_zero_trip_loop_and_maximum_iterations():
    def f(x, n):
        return dfc.while_loop(lambda s: dfc.reduce_sum(s) < 1e9, lambda s: s * x, x * 1.0,
                              maximum_iterations=n)
    x = np.array([1.1, 0.7])
    for n in (0, 1, 5):
        _, (g,) = check(f, x, np.int64(n), wrt=[0])
        np.testing.assert_allclose(g, (n + 1) * x ** n, rtol=1e-9)


def test_only_needed_values_are_saved():
    def f(x, w):
        def body(i, h):
            unused = dfc.exp(h) * 3.0 + dfc.sin(h)      # never reaches the loop variables
            also_unused = dfc.matmul(dfc.reshape(unused, [1, -1]), dfc.reshape(unused, [-1, 1]))
            z = h * w                                  # needs h (w is loop invariant: not saved)
            return i + 1 + dfc.cast(also_unused[0, 0] * 0.0, "int64"), dfc.tanh(z)   # needs tanh output
        return dfc.while_loop(lambda i, h: i < 5, body, (0, x))[1]
    g = build(f, dfc.TensorSpec([3], F64), dfc.TensorSpec([3], F64))
    pushed = sorted(g.nodes[n.inputs[1].split(":")[0]].op for n in g.nodes.values() if n.op == "StackPush")
    assert pushed == ["Identity", "Tanh"], pushed
    check(f, rng.normal(size=3), rng.normal(size=3))


def test_swap_memory_and_parallel_iterations_reach_the_gradient():
    def f(x):
        return dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, dfc.sin(s)), (0, x), swap_memory=True,
                              parallel_iterations=1)[1]
    g = build(f, dfc.TensorSpec([2], F64))
    stacks = [n for n in g.nodes.values() if n.op == "StackV2"]
    assert stacks and all(n.attrs["swap_memory"] for n in stacks)
    grad_enters = [n for n in g.nodes.values() if n.op == "Enter" and n.attrs["frame_name"].endswith("_grad")]
    assert grad_enters and all(n.attrs["parallel_iterations"] == 1 for n in grad_enters)
    check(f, np.array([0.3, 1.2]))


def test_gradient_inside_converted_function():
    @dfc.function(input_signature=[dfc.TensorSpec([], F64), dfc.TensorSpec([], "int64")])
    def f(x, n):
        s = x
        i = 0
        while i < n:
            if s > 2.0:
                s = s * 0.5
            else:
                s = s * x
            i += 1
        return s, dfc.gradients(s, x)

    def ref(x, n):
        s = x
        for _ in range(n):
            s = s * 0.5 if s > 2.0 else s * x
        return s
    for n in (0, 3, 7):
        x = 1.3
        _, g = f(np.float64(x), np.int64(n))
        want = (ref(x + 1e-6, n) - ref(x - 1e-6, n)) / 2e-6
        np.testing.assert_allclose(g, want, rtol=1e-6)
