"""Elementwise chains of fused loops on GPU-kind devices run as one kernel (dfc/runtime/gpu_fusion.py).

Checked on `strict:0`, the cupy double: values and dtypes equal the reference interpreter's (and the
unfused path's) exactly, launches per iteration drop, values needed outside a chain (gradient stack
pushes, loop variables, nested loops) stay outputs, deadness in conds is unchanged, DFC_FUSE_ELEMENTWISE=0
turns it off, cpu devices never group chains."""
import numpy as np
import pytest

import dfc
from dfc.runtime import gpu_fusion, strict
from dfc.runtime.strict import xp

F32 = "float32"


def _chains(session):
    out = []
    for plan in session._plans.values():
        for prog in getattr(plan, "programs", {}).values():
            out.extend(h for h in prog.helpers.values() if isinstance(h, gpu_fusion.Chain))
    return out


def _run(g, args, monkeypatch, fuse=True, device="strict:0"):
    """(results, compute-stream launches, fused kernels, the chains) of one call on `device`, fused loops."""
    monkeypatch.setenv(gpu_fusion.ENV, "1" if fuse else "0")
    s = dfc.Session(g, default_device=device, num_threads=0, fuse_loops=True)
    dev = s.devices.get(device)
    n0 = dev.compute_stream.seq if device.startswith("strict") else 0
    k0 = strict.fuse_stats["kernels"]
    got = s.call(*args)
    n = dev.compute_stream.seq - n0 if device.startswith("strict") else 0
    return got, n, strict.fuse_stats["kernels"] - k0, _chains(s)


def _same(got, want):
    got, want = (got, want) if isinstance(want, (tuple, list)) else ((got,), (want,))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        np.testing.assert_array_equal(a, b)


def _check(g, args, monkeypatch):
    """Fused chains, unfused and the reference interpreter agree exactly; returns the fused run."""
    want = dfc.Session(g, mode="reference").call(*args)
    fused = _run(g, args, monkeypatch, fuse=True)
    plain = _run(g, args, monkeypatch, fuse=False)
    _same(fused[0], want)
    _same(plain[0], want)
    assert fused[3] and not plain[3] and plain[2] == 0
    assert all(c.broken is None for c in fused[3])
    return fused, plain


# ---------------------------------------------------------------------------------- the strict double's fuse

def test_strict_fuse_runs_one_kernel_and_is_as_strict_as_cupy():
    a = xp.asarray(np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3))
    b = xp.asarray(np.float32(0.25))

    def f(x, y):
        t = xp.tanh(xp.add(xp.multiply(x, 0.5), y))         # a Python scalar stays weak: float32
        return t, xp.where(xp.less(t, y), t, y).astype("float64"), xp.multiply(y, 2.0)
    s = strict.get_current_stream()
    n0, k0 = s.seq, strict.fuse_stats["kernels"]
    t, w, y2 = xp.fuse(f)(a, b)
    assert s.seq - n0 == 1 and strict.fuse_stats["kernels"] - k0 == 1     # three outputs, one launch
    n0 = s.seq
    t2, w2, y3 = f(a, b)                                     # the same ops unfused: one launch each
    assert s.seq - n0 == 7
    for x, y in ((t, t2), (w, w2)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.get(), y.get())
    assert t.dtype == np.float32 and w.dtype == np.float64
    assert y2.shape == (2, 3) and y3.shape == ()            # cupy broadcasts every output to all inputs
    with pytest.raises(TypeError, match="Invalid argument type"):
        xp.fuse(f)(a, np.float32(1) + np.zeros(3, np.float32))   # a host array
    with pytest.raises(TypeError, match="Can't cast to bool"):
        xp.fuse(lambda x: x if xp.less(x, 0) else x)(a)      # no branching on values inside a kernel
    with pytest.raises(TypeError, match="not supported"):
        xp.fuse(lambda x: xp.sum(x))(a)                      # not elementwise
    with xp.cuda.Device(1):
        other = xp.asarray(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="array device = 1"):
        xp.fuse(f)(other, b)


# ---------------------------------------------------------------------------------- programs

def _body_chain(x, n):
    def body(i, h):
        z = dfc.tanh(h * 0.5 + x) * 2.0 - h
        return i + 1, dfc.sigmoid(z) + dfc.relu(z - 1.0)
    return dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]


def test_a_loop_body_chain_is_one_kernel_and_exact(monkeypatch):
    g = dfc.trace(_body_chain, dfc.TensorSpec([5], F32), dfc.TensorSpec([], "int32"))
    fused, plain = _check(g, (np.linspace(-1, 1, 5).astype(np.float32), np.int32(9)), monkeypatch)
    body = max(fused[3], key=lambda c: len(c.members))
    assert [body.plan.nodes[i].op for i in body.members] == ["Mul", "Add", "Tanh", "Mul", "Sub", "Sigmoid", "Sub",
                                                             "Relu", "Add"]
    assert fused[1] < plain[1] / 3


def test_launches_per_iteration_drop_from_k_to_one(monkeypatch):
    """Body: i + 1 and a chain of 7 elementwise ops on h (h*h, -, exp, h*0.5, -, maximum, +1); the predicate
    i < n. Unfused: 1 + 7 + 1 launches per iteration; fused: 1 + 1 + 1."""
    def f(x, n):
        def body(i, h):
            return i + 1, dfc.maximum(dfc.exp(-(h * h)) - h * 0.5, x) + 1.0
        return dfc.while_loop(lambda i, h: i < n, body, (np.int32(0), x))[1]
    g = dfc.trace(f, dfc.TensorSpec([64], F32), dfc.TensorSpec([], "int32"))
    x = np.linspace(-3, 3, 64).astype(np.float32)
    per_iter = {}
    for fuse in (False, True):
        counts = [_run(g, (x, np.int32(n)), monkeypatch, fuse=fuse) for n in (10, 30)]
        _same(counts[0][0], dfc.Session(g, mode="reference").call(x, np.int32(10)))
        per_iter[fuse] = (counts[1][1] - counts[0][1]) / 20
        assert (counts[1][2] - counts[0][2]) / 20 == (1 if fuse else 0)
    assert per_iter == {False: 9, True: 3}


def test_conds_inside_a_loop_keep_their_deadness(monkeypatch):
    def f(x, n):
        def body(i, h, s):
            h = dfc.cond(i % 2 == 0, lambda: dfc.tanh(h) * 2.0 + x, lambda: dfc.exp(-h) - h * h)
            s = dfc.cond(dfc.reduce_sum(h) > 0.0, lambda: s + dfc.abs(h) * 0.5, lambda: s - h)
            return i + 1, h, s
        return dfc.while_loop(lambda i, h, s: i < n, body, (0, x, dfc.zeros_like(x)))[1:]
    g = dfc.trace(f, dfc.TensorSpec([4], F32), dfc.TensorSpec([], "int32"))
    fused, _ = _check(g, (np.array([0.3, -1.2, 2.0, 0.1], np.float32), np.int32(7)), monkeypatch)
    assert len(fused[3]) >= 3          # one chain in each branch of the first cond, one more in the second


def test_a_chain_never_spreads_a_cond_branch_deadness_to_live_values(monkeypatch):
    """In the taken-or-not branch, tanh(h) + u reads u = h * 3 directly (the graph rewired past u's Switch,
    legal in the IR: the Add is dead when the branch is). u is also a loop variable: a chain {u, tanh, +}
    would make u dead whenever the branch is not taken, so those ops are not grouped together."""
    def f(x, n):
        def body(i, h, u):
            u2 = h * 3.0
            h2 = dfc.cond(i % 2 == 0, lambda: dfc.tanh(h) + u2, lambda: h - 1.0)
            return i + 1, h2, u2
        return dfc.while_loop(lambda i, h, u: i < n, body, (0, x, x))[1:]
    g = dfc.trace(f, dfc.TensorSpec([3], F32), dfc.TensorSpec([], "int32"))
    add = next(n for n in g.nodes.values()
               if n.op == "Add" and any(g.nodes[r.split(":")[0]].op == "Tanh" for r in n.data_inputs))
    mul = next(n for n in g.nodes.values() if n.op == "Mul" and n.name in g.frames()[0]
               and g.frames()[0][n.name] == g.frames()[0][add.name])
    g.set_input(add.name, 1, mul.name)
    fused, _ = _check(g, (np.array([0.5, -1.0, 2.0], np.float32), np.int32(6)), monkeypatch)   # ends untaken
    assert not any({"Mul", "Tanh"} <= {c.plan.nodes[i].op for i in c.members} for c in fused[3])


def test_a_value_that_leaves_a_chain_and_comes_back_splits_it(monkeypatch):
    """a = h * 2 feeds reduce_sum (not elementwise) and a * s + 1 reads both: one kernel for all three
    would need s before it could start, so a stays its own kernel; s = sum * 0.01, a * s + 1 and tanh are
    one chain."""
    def f(x, n):
        def body(i, h):
            a = h * 2.0
            s = dfc.reduce_sum(a) * 0.01
            return i + 1, dfc.tanh(a * s + 1.0)
        return dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]
    g = dfc.trace(f, dfc.TensorSpec([4], F32), dfc.TensorSpec([], "int32"))
    fused, _ = _check(g, (np.array([0.5, -1.0, 2.0, 0.25], np.float32), np.int32(5)), monkeypatch)
    p = fused[3][0].plan
    members = {i for c in fused[3] for i in c.members}
    a = next(i for i, n in enumerate(p.nodes) if n.op == "Mul" and any(p.nodes[d].op == "Sum"
                                                                        for d, _ in p.out_edges[i][0]))
    assert a not in members
    assert sorted(p.nodes[i].op for c in fused[3] for i in c.members if p.nodes[i].op != "Cast" and
                  p.nodes[i].op != "Less") == ["Add", "Mul", "Mul", "Tanh"]


def test_where_cast_logic_and_mixed_dtypes(monkeypatch):
    def f(x, n):
        def body(i, h, m):
            fi = dfc.cast(i, "float64") * 0.25
            pos = (h > 0.0) & (h < 2.0)
            h = dfc.where(pos, h * fi - 1.0, dfc.cast(-h, "float64") * 0.5 + fi)
            return i + 1, h, m | pos
        return dfc.while_loop(lambda i, h, m: i < n, body, (0, x, x > 100.0))[1:]
    g = dfc.trace(f, dfc.TensorSpec([6], "float64"), dfc.TensorSpec([], "int64"))
    _check(g, (np.linspace(-2, 3, 6), np.int64(6)), monkeypatch)


def test_an_output_that_reads_only_some_inputs_keeps_its_shape(monkeypatch):
    """a depends on the 0-d s only, v on the vector too: cupy would broadcast a to v's shape, so the call
    runs unfused; shapes and values stay those of numpy."""
    def f(x, n):
        def body(i, s, v):
            a = s * 0.5 + 1.0
            return i + 1, a, v + a * x
        return dfc.while_loop(lambda i, s, v: i < n, body, (0, dfc.constant(1.0, F32), x))[1:]
    g = dfc.trace(f, dfc.TensorSpec([3], F32), dfc.TensorSpec([], "int32"))
    fused, _ = _check(g, (np.array([1.0, 2.0, 3.0], np.float32), np.int32(4)), monkeypatch)
    assert fused[0][0].shape == () and fused[0][1].shape == (3,)


def test_gradients_through_a_loop_with_fused_chains(monkeypatch):
    """The forward loop's chain pushes its intermediates for the gradient (they stay kernel outputs); the
    backward loop's elementwise chains are fused too; gradients equal the reference interpreter's."""
    def f(x, w, n):
        def body(i, h):
            z = h * w + x
            return i + 1, dfc.tanh(z) * 0.5 + dfc.sigmoid(z) * h
        out = dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]
        loss = dfc.reduce_sum(out * out)
        return (loss,) + tuple(dfc.gradients(loss, [x, w]))
    g = dfc.trace(f, dfc.TensorSpec([4], F32), dfc.TensorSpec([4], F32), dfc.TensorSpec([], "int32"))
    x = np.array([0.5, -0.25, 1.0, 0.1], np.float32)
    w = np.array([0.9, 1.1, -0.7, 0.3], np.float32)
    fused, plain = _check(g, (x, w, np.int32(6)), monkeypatch)
    pushed = [c for c in fused[3] for o in c.outputs
              if any(c.plan.nodes[d].op == "StackPush" for d, _ in c.plan.out_edges[o][0])]
    assert pushed, "a forward chain's value that the gradient needs is a kernel output"
    frames = {c.plan.frame_names[c.plan.fid[c.members[0]]] for c in fused[3]}
    assert len(frames) >= 2, frames         # chains in the forward and in the gradient loop
    assert fused[1] < plain[1]
    # and the gradient is right (float64 finite differences of the same program)
    g64 = dfc.trace(f, dfc.TensorSpec([4], "float64"), dfc.TensorSpec([4], "float64"), dfc.TensorSpec([], "int32"))
    monkeypatch.setenv(gpu_fusion.ENV, "1")
    s = dfc.Session(g64, default_device="strict:0")
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    _, gx, _ = s.call(x64, w64, np.int32(6))
    eps, fd = 1e-6, np.zeros(4)
    for k in range(4):
        d = np.zeros(4)
        d[k] = eps
        fd[k] = (s.call(x64 + d, w64, np.int32(6))[0] - s.call(x64 - d, w64, np.int32(6))[0]) / (2 * eps)
    np.testing.assert_allclose(gx, fd, rtol=1e-5, atol=1e-7)


def test_nested_loops_fuse_chains_in_each_frame(monkeypatch):
    def f(x, n):
        def outer(i, h):
            inner = dfc.while_loop(lambda j, u: j < i, lambda j, u: (j + 1, dfc.sin(u) * 0.5 + u * u - 0.1),
                                   (0, h))[1]
            return i + 1, dfc.tanh(inner + h) * 0.9
        return dfc.while_loop(lambda i, h: i < n, outer, (0, x))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], F32), dfc.TensorSpec([], "int32"))
    fused, _ = _check(g, (np.array([0.2, -0.4, 0.6], np.float32), np.int32(5)), monkeypatch)
    assert len({c.plan.fid[c.members[0]] for c in fused[3]}) == 2


# ---------------------------------------------------------------------------------- errors, fallback, devices

def test_a_failing_kernel_runs_unfused_and_errors_name_their_node(monkeypatch):
    g = dfc.trace(_body_chain, dfc.TensorSpec([5], F32), dfc.TensorSpec([], "int32"))
    args = (np.linspace(-1, 1, 5).astype(np.float32), np.int32(4))
    want = dfc.Session(g, mode="reference").call(*args)

    def broken(self, *a):
        raise RuntimeError("nvrtc: compilation failed")
    monkeypatch.setattr(strict.Fused, "__call__", broken)
    got, _, kernels, chains = _run(g, args, monkeypatch)
    _same(got, want)
    assert kernels == 0 and chains and all("compilation failed" in c.broken for c in chains)

    def f(x, y, n):      # shapes that only disagree at run time: the error names the op, fused or not
        return dfc.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, dfc.exp(h * y) + 1.0), (0, x))[1]
    g2 = dfc.trace(f, dfc.TensorSpec([None], F32), dfc.TensorSpec([None], F32), dfc.TensorSpec([], "int32"))
    monkeypatch.undo()
    errors = []
    for fuse in (True, False):
        with pytest.raises(dfc.DfcError) as e:
            _run(g2, (np.ones(3, np.float32), np.ones(2, np.float32), np.int32(2)), monkeypatch, fuse=fuse)
        errors.append((e.value.node, type(e.value)))
    assert errors[0] == errors[1] and errors[0][0].startswith("mul")


def test_switch_off_and_cpu_devices_give_the_same_values(monkeypatch):
    g = dfc.trace(_body_chain, dfc.TensorSpec([5], F32), dfc.TensorSpec([], "int32"))
    args = (np.linspace(-1, 1, 5).astype(np.float32), np.int32(6))
    on, off = _run(g, args, monkeypatch, fuse=True), _run(g, args, monkeypatch, fuse=False)
    cpu = _run(g, args, monkeypatch, fuse=True, device="cpu:0")
    _same(on[0], off[0])
    _same(on[0], cpu[0])
    assert on[2] > 0 and off[2] == 0 and not off[3]
    assert cpu[2] == 0 and not cpu[3]          # numpy devices keep the per-op path (numba compiles those)
    monkeypatch.setenv(gpu_fusion.ENV, "off")
    assert not gpu_fusion.enabled()


def test_an_lstm_training_step_is_exact_with_far_fewer_launches(monkeypatch):
    """The forward cell's elementwise ops (gates, c, h) are one kernel whose outputs include the gate values
    the gradient loop pops; the gradient loop's elementwise ops are fused too; loss and gradients equal the
    reference interpreter's."""
    H, B, T = 8, 4, 6

    def f(xs, w, h0):
        def body(t, h, c):
            z = dfc.matmul(dfc.concat([xs[t], h], 1), w)
            i, fg, o, g = z[:, :H], z[:, H:2 * H], z[:, 2 * H:3 * H], z[:, 3 * H:]
            c = dfc.sigmoid(fg) * c + dfc.sigmoid(i) * dfc.tanh(g)
            return t + 1, dfc.sigmoid(o) * dfc.tanh(c), c
        h = dfc.while_loop(lambda t, h, c: t < T, body, (0, h0, h0))[1]
        loss = dfc.reduce_sum(h * h)
        return (loss,) + tuple(dfc.gradients(loss, [w, h0]))
    g = dfc.trace(f, dfc.TensorSpec([T, B, H], F32), dfc.TensorSpec([2 * H, 4 * H], F32), dfc.TensorSpec([B, H], F32))
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(T, B, H)).astype(np.float32), (rng.normal(size=(2 * H, 4 * H)) * 0.3).astype(np.float32),
            rng.normal(size=(B, H)).astype(np.float32))
    fused, plain = _check(g, args, monkeypatch)
    assert fused[1] * 2 < plain[1]
    cell = [c for c in fused[3] if "grad" not in c.plan.frame_names[c.plan.fid[c.members[0]]]]
    assert len(cell) == 1 and sorted(c.plan.nodes[i].op for c in cell for i in c.members).count("Sigmoid") == 3
    assert any(cell[0].plan.nodes[d].op == "StackPush" for o in cell[0].outputs
               for d, _ in cell[0].plan.out_edges[o][0])
