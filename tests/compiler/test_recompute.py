"""dfc.recompute_grad and dfc.gradient_memory: the gradient of a while loop recomputes, stacks or swaps each
saved value. Gradients equal the plain (all stacked) gradient and finite differences; fewer values are
pushed; a loop that runs out of memory with plain stacks fits under a Session memory_limit."""
import numpy as np
import pytest

import dfc
from _gradcheck import numeric_grad
from tests.conftest import run_all_modes

F64 = "float64"
H = 3


def cell(x, h, W):
    z = dfc.matmul(dfc.concat([x, h], 1), W)
    return dfc.tanh(z) * dfc.sigmoid(z) + 0.5 * h


def rnn_graph(block=cell, policy=None, **kw):
    """A @dfc.function RNN over a tensor number of steps (Python `while` on a tensor), loss and gradients."""
    @dfc.function
    def f(xs, W, h):
        n = dfc.shape(xs)[0]
        t, loss = 0, dfc.constant(0.0, F64)
        while t < n:
            h = block(xs[t], h, W)
            loss += dfc.reduce_sum(h * h)
            t += 1
        if policy is None:
            return loss, dfc.gradients(loss, [xs, W])
        with dfc.gradient_memory(policy, **kw):
            return loss, dfc.gradients(loss, [xs, W])
    g = f.trace(dfc.TensorSpec([None, 2, H], F64), dfc.TensorSpec([2 * H, H], F64), dfc.TensorSpec([2, H], F64))
    g.verify()
    return g


def pushed(g):
    """The ops of the values the forward loops push for their gradients."""
    return sorted(g.nodes[n.data_inputs[1].split(":")[0]].op for n in g.nodes.values() if n.op == "StackPush")


def rnn_inputs(T=5):
    rng = np.random.default_rng(0)
    return rng.normal(size=(T, 2, H)), rng.normal(size=(2 * H, H)) * 0.5, rng.normal(size=(2, H))


@pytest.fixture(scope="module")
def plain():
    g = rnn_graph()
    return g, dfc.Session(g).call(*rnn_inputs())


@pytest.mark.parametrize("how", ["recompute_grad", "recompute", "budget", "swap"])
def test_gradients_equal_the_plain_gradient_and_finite_differences(plain, how):
    g0, want = plain
    if how == "recompute_grad":
        g = rnn_graph(dfc.recompute_grad(cell))
    elif how == "budget":       # room for one [2, H] float64 a step: the matmul's output, swapped past it
        g = rnn_graph(policy="budget", budget=48 * 5, iterations=5)
    else:
        g = rnn_graph(policy=how)
    args = rnn_inputs()
    # every execution path once (the recomputed graph); the policies' graphs on the default path
    loss, grads = run_all_modes(g, *args) if how == "recompute_grad" else dfc.Session(g).call(*args)
    np.testing.assert_allclose(loss, want[0], rtol=1e-13)
    for got, w in zip(grads, want[1]):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14)
    if how == "recompute_grad":
        s = dfc.Session(g)
        for k in (0, 1):
            np.testing.assert_allclose(grads[k], numeric_grad(lambda *a: s.call(*a)[0], list(args), k),
                                       rtol=1e-6, atol=1e-8)


def test_recomputing_pushes_fewer_values(plain):
    g0, _ = plain
    assert pushed(g0) == ["Add", "Concat", "Const", "Identity", "Identity", "Sigmoid", "Tanh"]
    # Only the block's inputs x_t and h (and the step t, which the gradient of xs[t] reads)
    assert pushed(rnn_graph(dfc.recompute_grad(cell))) == ["GetItem", "Identity", "Identity"]
    # Only the loop's variables
    assert pushed(rnn_graph(policy="recompute")) == ["Identity", "Identity"]


def test_the_budget_stacks_what_fits_and_swaps_an_expensive_value_past_it():
    g = rnn_graph(policy="budget", budget=48 * 5, iterations=5)
    swaps = {}
    for n in g.nodes.values():
        if n.op == "StackPush":
            stack = g.nodes[g.nodes[n.data_inputs[0].split(":")[0]].data_inputs[0].split(":")[0]]   # through Enter
            swaps[g.nodes[n.data_inputs[1].split(":")[0]].op] = stack.attrs.get("swap_memory", False)
    assert swaps["Add"] is False            # the first value asked for fits the 48 bytes a step
    assert swaps["MatMul"] is True          # the matmul's output is not recomputed; past the budget, swapped
    assert "Sigmoid" not in swaps and "Tanh" not in swaps      # cheap: recomputed from it
    roomy = rnn_graph(policy="budget", budget="1MB", iterations=5)
    assert pushed(roomy) == pushed(rnn_graph())           # everything fits: plain stacks


def test_a_random_draw_in_a_recomputed_block_is_saved_not_drawn_again():
    def noisy(x, h, W):
        keep = dfc.random_uniform([2, H], dtype=F64, seed=7) < 0.8
        return dfc.where(keep, cell(x, h, W), 0.0 * h)

    def f(xs, W, h, block):
        def body(t, h, loss):
            h = block(xs[t], h, W)
            return t + 1, h, loss + dfc.reduce_sum(h * h)
        loss = dfc.while_loop(lambda t, h, l: t < dfc.shape(xs)[0], body, (0, h, dfc.constant(0.0, F64)))[2]
        return loss, dfc.gradients(loss, [W])[0]
    specs = [dfc.TensorSpec([None, 2, H], F64), dfc.TensorSpec([2 * H, H], F64), dfc.TensorSpec([2, H], F64)]
    plain = dfc.trace(lambda *a: f(*a, noisy), *specs)
    rc = dfc.trace(lambda *a: f(*a, dfc.recompute_grad(noisy)), *specs)
    assert "RandomUniform" in pushed(rc)
    args = rnn_inputs(6)
    want, got = dfc.Session(plain).call(*args), dfc.Session(rc).call(*args)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_recompute_grad_in_a_nested_loop_with_a_cond():
    def block(x, s):
        y = dfc.cond(dfc.reduce_sum(x) > 0, lambda: dfc.sin(x * s), lambda: dfc.cos(x) * s)
        return 0.5 * x + dfc.tanh(y)

    def f(x, s, block):
        def outer(i, x):
            def inner(j, x):
                return j + 1, block(x, s)
            return i + 1, dfc.while_loop(lambda j, x: j < i + 1, inner, (0, x))[1] * 0.9
        y = dfc.reduce_sum(dfc.while_loop(lambda i, x: i < 3, outer, (0, x))[1])
        return y, dfc.gradients(y, [x, s])
    specs = [dfc.TensorSpec([4], F64), dfc.TensorSpec([], F64)]
    x, s = np.array([0.3, -0.2, 0.5, 0.1]), np.float64(1.3)
    plain = dfc.trace(lambda *a: f(*a, block), *specs)
    want = dfc.Session(plain).call(x, s)
    rc = dfc.trace(lambda *a: f(*a, dfc.recompute_grad(block)), *specs)
    assert len(pushed(rc)) < len(pushed(plain))    # the cond's values are saved, the rest recomputed
    got = dfc.Session(rc).call(x, s)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    sess = dfc.Session(rc)
    for k in (0, 1):
        np.testing.assert_allclose(got[1][k], numeric_grad(lambda *a: sess.call(*a)[0], [x, s], k), rtol=1e-6)


N, T = 16384, 40     # 128 KiB values, 40 steps: plain stacks hold 3 x 40 of them (15.7 MB), recomputation 40


def elementwise_loop(policy=None, **kw):
    def f(h0, w):
        def body(t, h):
            a = dfc.tanh(h * w)
            return t + 1, a * dfc.sigmoid(a + h) + dfc.sin(h)
        y = dfc.reduce_sum(dfc.while_loop(lambda t, h: t < T, body, (0, h0))[1])
        if policy is None:
            return dfc.gradients(y, [h0, w])
        with dfc.gradient_memory(policy, **kw):
            return dfc.gradients(y, [h0, w])
    return dfc.trace(f, dfc.TensorSpec([N], F64), dfc.TensorSpec([N], F64))


def test_a_loop_out_of_memory_with_stacks_fits_with_the_policy():
    rng = np.random.default_rng(1)
    h0, w = rng.normal(size=N), rng.normal(size=N)
    want = dfc.Session(elementwise_loop()).call(h0, w)
    with pytest.raises(dfc.DfcOutOfMemory):
        dfc.Session(elementwise_loop(), memory_limit="12MB").call(h0, w)
    for g in (elementwise_loop("budget", budget="8MB", iterations=T), elementwise_loop("recompute")):
        assert pushed(g) == ["Identity"]
        s = dfc.Session(g, memory_limit="12MB")
        got = s.call(h0, w)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
        assert s.memory_limit.peak < 12_000_000


def test_bad_options_are_refused_clearly():
    with pytest.raises(dfc.DfcError, match="one of stack, swap, recompute, budget"):
        dfc.gradient_memory("lazy")
    with pytest.raises(dfc.DfcError, match="needs budget=.*iterations="):
        dfc.gradient_memory("budget", budget="1GB")
    with pytest.raises(dfc.DfcError, match="takes no budget"):
        dfc.gradient_memory("stack", budget="1GB")
    with pytest.raises(dfc.DfcError, match="not a size"):
        dfc.gradient_memory("budget", budget="lots", iterations=3)


def test_outside_any_graph_recompute_grad_just_calls_f():
    assert dfc.recompute_grad(lambda x: x * 2)(np.float64(3.0)) == 6.0


def test_the_memory_policy_benchmark_runs_tiny():
    """The LSTM step of benchmarks/memory_policy.py: out of memory with stacks where recomputation fits (its
    values are too small to swap), the gradients checked against numpy's backprop inside the benchmark."""
    from benchmarks import memory_policy
    res = memory_policy.main(["--hidden", "8", "--batch", "2", "--lengths", "5,40", "--capacity-mb", "0.025",
                              "--reps", "1"])
    short, long = res["rows"]
    assert all(short[p]["result"] == "ok" for p in memory_policy.POLICIES)
    assert long["stack"]["result"] == "OOM" and long["recompute"]["result"] == "ok"
    assert long["recompute"]["pushes_per_iteration"] < short["stack"]["pushes_per_iteration"]


def test_the_recompute_policy_saves_a_small_value_rather_than_the_big_one_it_would_need():
    """Recomputing sum(noise) would save the draw `noise` (a draw is saved, never redrawn): the policy saves
    the sum instead; likewise a Shape is saved, not recomputed from the tensor it describes."""
    def f(x, policy):
        def body(i, s):
            noise = dfc.random_uniform(dfc.shape(x), dtype=F64, seed=3)
            return i + 1, s + dfc.reduce_sum(noise) * dfc.reduce_sum(x * s)
        y = dfc.while_loop(lambda i, s: i < 4, body, (0, dfc.constant(1.0, F64)))[1]
        with dfc.gradient_memory(policy):
            return y, dfc.gradients(y, [x])[0]
    g = dfc.trace(lambda x: f(x, "recompute"), dfc.TensorSpec([None], F64))
    assert pushed(g) == ["Identity", "Shape", "Sum"]
    x = np.array([0.1, -0.3, 0.2])
    want = dfc.Session(dfc.trace(lambda x: f(x, "stack"), dfc.TensorSpec([None], F64))).call(x)
    got = dfc.Session(g).call(x)           # each Session's first run: the same draws
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)


@pytest.mark.parametrize("policy", ["recompute", "budget"])
def test_a_long_chain_of_recomputed_ops_does_not_recurse(policy):
    """A loop body chaining 150 ops: the recomputation walks them with explicit stacks (recursing, it passed
    Python's recursion limit)."""
    def f(x):
        def body(i, h):
            for _ in range(150):
                h = dfc.sin(h) * 0.99
            return i + 1, h
        y = dfc.reduce_sum(dfc.while_loop(lambda i, h: i < 2, body, (0, x))[1])
        with dfc.gradient_memory(policy, **({"budget": 100, "iterations": 2} if policy == "budget" else {})):
            return y, dfc.gradients(y, [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([3], F64))
    assert pushed(g) == ["Identity"]
    x = h = np.array([0.5, -0.2, 1.0])
    want = np.ones(3)
    for _ in range(300):        # d/dx of h <- 0.99 sin(h), 300 times
        want, h = want * 0.99 * np.cos(h), 0.99 * np.sin(h)
    np.testing.assert_allclose(dfc.Session(g).call(x)[1], want, rtol=1e-12)
