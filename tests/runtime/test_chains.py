"""Chains of pure kernels on the general path run as one task (dfc/runtime/chains.py): which nodes form a
chain, and that a run with chains computes, fails and traces exactly as one without them."""
import json

import numpy as np
import pytest

import dfc
from dfc.errors import DfcError
from dfc.ir import structure
from dfc.runtime.chains import ChainKernel

from benchmarks.parallel_iterations import build
from tests.conftest import run_all_modes

# chains are built for the CPU kernel pool; a GPU (or the strict test device) has none
pytestmark = pytest.mark.host_devices("chains run on the CPU thread pool")

N = 128     # big enough for the kernel pool (executor.HEAVY_ELEMENTS)


@pytest.fixture(autouse=True)
def _graph_as_written(monkeypatch):
    """These tests name the chains of the graphs as written: common subexpression elimination would merge the
    loop body's two `i + 1` (tests/runtime/test_cse.py tests it)."""
    from dfc.runtime import cse
    monkeypatch.setattr(cse, "ENABLED", False)


def _general(g, **kw):
    """A Session that runs every loop frame on the general path, with a kernel pool."""
    return dfc.Session(g, fuse_loops=False, num_threads=2, **kw)


def _plan(s, g):
    fetches = [leaf["ref"] for leaf in structure.leaves(g.signature["outputs"])]
    return s.plan([f if ":" in f else f + ":0" for f in fetches], {i["node"] for i in g.signature["inputs"]},
                  tuple(g.signature.get("targets", [])))


def _chain_ops(s, g):
    p = _plan(s, g)
    return sorted([p.nodes[i].op for i in members] for members in p.chains.values())


def _body_graph(n_iter):
    """Each iteration: three matmul+tanh on its own scaled copy of `a`, summed into an accumulator (the
    Figure 12 benchmark's graph, at N x N)."""
    return build(n_iter, N)


def _trace(path):
    """A trace file's lanes ((pid, tid) -> thread name) and kernel spans."""
    events = json.load(open(path))["traceEvents"]
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    return lanes, [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]


def _matrix(seed=0, n=N):
    return (np.random.default_rng(seed).standard_normal((n, n)) / n).astype(np.float32)


def _numpy_body(a, n_iter):
    acc = np.float32(0)
    for i in range(n_iter):
        m = a * np.float32(i + 1)
        for _ in range(3):
            m = np.tanh(m @ a)
        acc = acc + m.sum(dtype=np.float32)
    return acc


def test_an_iterations_heavy_work_is_one_chain_and_its_value_is_unchanged():
    g = _body_graph(5)
    a = _matrix()
    s = _general(g)
    got = s.call(a)
    # the counter's i + 1 starts it (its only consumer is the cast); the invariant `a` joins each matmul; the
    # accumulator's add is not in it: acc comes from the loop, later than the chain's first input
    # (the loop predicate's Less -> LoopCond is a chain too: both cheap, run inline on the scheduler)
    assert _chain_ops(s, g) == [["Add", "Cast", "Mul", "MatMul", "Tanh", "MatMul", "Tanh", "MatMul", "Tanh", "Sum"],
                                ["Less", "LoopCond"]]
    np.testing.assert_array_equal(got, dfc.Session(g, mode="reference").call(a))
    np.testing.assert_allclose(got, _numpy_body(a, 5), rtol=1e-4)
    np.testing.assert_array_equal(run_all_modes(g, a), got)


def test_one_pool_task_per_chain():
    g = _body_graph(4)
    s = _general(g)
    s.call(_matrix())
    submitted = []
    pool = s._get_pool()
    real_submit = pool.submit

    def submit(fn, i, it, args):
        submitted.append(_plan(s, g).nodes[i].op)
        return real_submit(fn, i, it, args)
    pool.submit = submit
    try:
        s.call(_matrix())
    finally:
        del pool.submit
    # one task per iteration (its chain; the head is the counter's Add) instead of one per heavy kernel
    assert submitted == ["Add"] * 4


def test_chains_stop_at_a_value_used_twice_and_at_a_late_input():
    def f(a, b):
        def body(i, acc):
            t = dfc.tanh(a * dfc.cast(i + 1, "float32"))
            u = dfc.exp(t @ b)            # b: loop invariant, joins the chain
            v = u * u                     # u read twice: the chain ends at exp
            w = dfc.sin(v) + acc          # acc: from the loop, not an invariant: sin ends its own chain,
            return i + 1, dfc.reduce_mean(w)    # and the add starts one
        return dfc.while_loop(lambda i, acc: i < 3, body, (0, dfc.constant(np.float32(0))))[1]
    spec = dfc.TensorSpec([N, N], "float32")
    g = dfc.trace(f, spec, spec)
    a, b = _matrix(0), _matrix(1)
    s = _general(g)
    got = s.call(a, b)
    assert _chain_ops(s, g) == [["Add", "Cast", "Mul", "Tanh", "MatMul", "Exp"], ["Add", "Mean"], ["Less", "LoopCond"],
                                ["Mul", "Sin"]]
    np.testing.assert_array_equal(run_all_modes(g, a, b), got)


def test_no_chains_without_a_pool_or_on_fused_frames_or_when_turned_off(monkeypatch):
    g = _body_graph(3)
    for kw in (dict(fuse_loops=False, num_threads=0), dict(fuse_loops=True, num_threads=2)):
        s = dfc.Session(g, **kw)
        s.call(_matrix())
        assert _plan(s, g).chains == {}, kw
    with_chains = _general(g)
    want = with_chains.call(_matrix())
    assert _plan(with_chains, g).chains
    monkeypatch.setenv("DFC_CHAINS", "0")
    s = _general(g)
    np.testing.assert_array_equal(s.call(_matrix()), want)
    assert _plan(s, g).chains == {}


def test_a_chain_inside_a_cond_is_dead_when_its_branch_is_not_taken():
    def f(a):
        def body(i, acc):
            def heavy():
                return dfc.reduce_sum(dfc.tanh(dfc.tanh(a * 2.0) @ a))
            x = dfc.cond(i % 2 == 0, heavy, lambda: dfc.constant(np.float32(1)))
            return i + 1, acc + x
        return dfc.while_loop(lambda i, acc: i < 5, body, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([N, N], "float32"))
    a = _matrix()
    s = _general(g)
    got = s.call(a)
    assert any("MatMul" in ops for ops in _chain_ops(s, g))
    want = np.float32(0)
    for i in range(5):
        want = want + (np.tanh(np.tanh(a * np.float32(2)) @ a).sum(dtype=np.float32) if i % 2 == 0 else np.float32(1))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_array_equal(run_all_modes(g, a), got)


def test_gradients_through_a_loop_with_chains_match_every_path():
    def f(a, w):
        def body(i, h, acc):
            z = dfc.tanh(dfc.tanh(a * dfc.cast(i + 1, "float32")) @ w)
            return i + 1, h, acc + dfc.reduce_sum(z * h)
        _, _, total = dfc.while_loop(lambda i, h, acc: i < 3, body, (0, a, dfc.constant(np.float32(0))))
        return dfc.gradients(total, [w])[0]
    spec = dfc.TensorSpec([N, N], "float32")
    g = dfc.trace(f, spec, spec)
    a, w = _matrix(0), _matrix(1)
    s = _general(g)
    got = s.call(a, w)
    assert _plan(s, g).chains
    np.testing.assert_array_equal(run_all_modes(g, a, w), got)
    # against finite differences in float64 numpy, along one direction
    def total(w):
        acc = 0.0
        a64 = a.astype(np.float64)
        for i in range(3):
            acc += (np.tanh(np.tanh(a64 * (i + 1)) @ w) * a64).sum()
        return acc
    d = _matrix(2).astype(np.float64)
    eps = 1e-4
    fd = (total(w + eps * d) - total(w - eps * d)) / (2 * eps)
    np.testing.assert_allclose((got.astype(np.float64) * d).sum(), fd, rtol=1e-3)


def test_an_error_inside_a_chain_names_the_member_that_failed():
    def f(a):
        def body(i, acc):
            t = dfc.tanh(a * dfc.cast(i + 1, "float32"))
            r = dfc.reshape(t, [-1, 7])        # 128 x 128 does not split into rows of 7: fails at run time
            return i + 1, acc + dfc.reduce_sum(dfc.exp(r))
        return dfc.while_loop(lambda i, acc: i < 3, body, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([None, None], "float32"))
    s = _general(g)
    with pytest.raises(DfcError) as e:
        s.call(_matrix())
    assert any("Reshape" in ops for ops in _chain_ops(s, g))     # the failing member is inside a chain
    with pytest.raises(DfcError) as ref:
        dfc.Session(g, mode="reference").call(_matrix())
    assert e.value.node == ref.value.node and "reshape" in e.value.node.lower()
    assert e.value.loc is not None and e.value.loc == ref.value.loc       # the user's source line


def test_a_traced_run_has_a_span_per_chain_member(tmp_path):
    g = _body_graph(3)
    out = tmp_path / "run.json"
    s = _general(g, trace=str(out))
    s.call(_matrix())
    assert _plan(s, g).chains
    lanes, kernels = _trace(out)
    for it in range(3):
        mine = sorted((k for k in kernels if k["args"].get("iteration") == it and k["args"]["op"] in ("MatMul", "Tanh")),
                      key=lambda k: k["ts"])
        assert [k["args"]["op"] for k in mine] == ["MatMul", "Tanh"] * 3
        assert len({lanes[(k["pid"], k["tid"])] for k in mine}) == 1        # one task: one pool thread
        assert lanes[(mine[0]["pid"], mine[0]["tid"])].startswith("pool")


def test_plan_tables_after_chaining_wait_for_every_input():
    """The chain's first node waits for all the chain's inputs: its arity counts the ones it took over."""
    g = _body_graph(2)
    s = _general(g)
    s.call(_matrix())
    p = _plan(s, g)
    [(head, members)] = [(h, m) for h, m in p.chains.items() if "MatMul" in [p.nodes[i].op for i in m]]
    assert p.arity[head][1] == len(p.ins[head])
    for src, port in p.ins[head]:
        assert (head, p.ins[head].index((src, port))) in p.out_edges[src][port]
    for m in members[1:]:
        assert not any(e for port in p.out_edges[m] for e in port) and not p.ins[m]
    assert isinstance(p.kern[head], ChainKernel) and p.heavy[head]


def test_a_chain_that_makes_a_large_value_from_small_inputs_still_goes_to_the_pool(tmp_path):
    # the chain's own inputs are scalars (the counter); its Fill makes an N x N matrix that the heavy tanh
    # reads: with static shapes the chain is marked for the pool, so iterations still overlap there
    def f(x):
        def body(i, acc):
            z = dfc.fill([N, N], dfc.cast(i + 1, "float32") * x)
            return i + 1, acc + dfc.reduce_sum(dfc.tanh(z))
        return dfc.while_loop(lambda i, acc: i < 4, body, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    out = tmp_path / "run.json"
    s = _general(g, trace=str(out))
    got = s.call(np.float32(0.001))
    p = _plan(s, g)
    [head] = [h for h, m in p.chains.items() if "Tanh" in [p.nodes[i].op for i in m]]
    assert head in p.pooled
    lanes, kernels = _trace(out)
    tanhs = [e for e in kernels if e["args"]["op"] == "Tanh"]
    assert len(tanhs) == 4 and all(lanes[(e["pid"], e["tid"])].startswith("pool") for e in tanhs)
    want = sum(np.float32(N * N) * np.tanh(np.float32(0.001) * np.float32(i + 1)) for i in range(4))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_array_equal(run_all_modes(g, np.float32(0.001)), got)


def test_with_unknown_shapes_a_heavy_member_starts_its_own_chain():
    # with no static size a heavy kernel's pool decision stays with its own inputs, as without chains
    def f(a):
        def body(i, acc):
            return i + 1, acc + dfc.reduce_sum(dfc.tanh(a * dfc.cast(i + 1, "float32")))
        return dfc.while_loop(lambda i, acc: i < 3, body, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([None, None], "float32"))
    s = _general(g)
    got = s.call(_matrix())
    ops = _chain_ops(s, g)
    assert ["Add", "Cast"] in ops and not any("Mul" in c and c[0] != "Mul" for c in ops)
    np.testing.assert_array_equal(run_all_modes(g, _matrix()), got)


def test_fused_frames_name_the_chains_of_an_overlapping_frame(monkeypatch):
    from dfc.runtime import overlap
    monkeypatch.setattr(overlap, "OVERLAP_WORK", N ** 3)        # a 128-sized body overlaps (as in
    monkeypatch.setattr(overlap, "blas_threads", lambda: 1)     # test_parallel_iterations.py)
    g = _body_graph(3)
    [src] = dfc.Session(g, num_threads=2).fused_frames().values()
    assert src.startswith("# not fused: runs on the general path to overlap iterations")
    chains = sorted(x.split(": ")[1].split(" -> ") for x in src.splitlines() if x.startswith("# chain (one task): "))
    assert [c[3:] for c in chains if "matmul" in c] == [["matmul", "tanh", "matmul_1", "tanh_1", "matmul_2", "tanh_2",
                                                         "sum"]]
    assert ["less", "while_loop_cond"] in chains


@pytest.mark.parametrize("compile_loops", [False, True])
def test_a_chain_fed_by_a_fused_inner_loop_in_an_overlapping_frame(monkeypatch, compile_loops):
    # the inner loop is light (fused, or compiled to machine code) and nested in a heavy outer loop that
    # overlaps its iterations; the inner loop's result enters a chain twice (its first node and, as a value
    # the chain already has, a later member), so the chain takes over one of the Exit's edges
    from dfc.runtime import overlap
    monkeypatch.setattr(overlap, "OVERLAP_WORK", N ** 3)
    monkeypatch.setattr(overlap, "blas_threads", lambda: 1)

    def f(a):
        def body(i, acc):
            e = dfc.while_loop(lambda j, v: j < 3, lambda j, v: (j + 1, v * 0.5 + 1.0),
                               (0, dfc.cast(i, "float32")))[1]
            u = dfc.matmul(dfc.tanh(a * e), a) * e
            return i + 1, acc + dfc.reduce_sum(u)
        return dfc.while_loop(lambda i, acc: i < 4, body, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([N, N], "float32"))
    a = _matrix()
    s = dfc.Session(g, num_threads=2, compile_loops=compile_loops)
    got = s.call(a)
    p = _plan(s, g)
    assert p.programs and any(["Mul", "Tanh", "MatMul", "Mul"] == [p.nodes[i].op for i in m][:4]
                              for m in p.chains.values())
    np.testing.assert_array_equal(got, dfc.Session(g, mode="reference").call(a))
    np.testing.assert_array_equal(s.call(a), got)
    want = np.float32(0)
    for i in range(4):
        e = np.float32(i)
        for _ in range(3):
            e = e * np.float32(0.5) + np.float32(1)
        want = want + ((np.tanh(a * e) @ a) * e).sum(dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_a_stuck_chain_is_reported_by_the_member_that_waits():
    # a chain waits for all its inputs at its first node; when one never comes, the deadlock error names
    # the member that reads it. Here the loop invariant of `* x` is cut off by hand, and the frame waits for
    # one Enter more than it gets (as in test_session.py), so its iterations stay to be reported
    from concurrent.futures import ThreadPoolExecutor
    from dfc.runtime.executor import KernelContext, Plan, Run

    def f(x, n):
        return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, dfc.tanh(s) * x), (0, x))[1]
    g = dfc.trace(f, dfc.TensorSpec([N, N], "float32"), dfc.TensorSpec([], "int64"))
    fetch = structure.leaves(g.signature["outputs"])[0]["ref"]
    plan = Plan(g, [fetch], {"x", "n"}, (), overlap=True)
    [(head, members)] = [(h, m) for h, m in plan.chains.items() if "Mul" in [plan.nodes[i].op for i in m]]
    mul = next(i for i in members if plan.nodes[i].op == "Mul")
    [(inv, slot)] = [(s, k) for k, (s, _) in enumerate(plan.ins[head]) if plan.is_constant[s]]
    plan.out_edges[inv][0].remove((head, slot))
    plan.enter_count[plan.fid[head]] += 1
    with ThreadPoolExecutor(2) as pool, pytest.raises(dfc.DfcDeadlockError, match="still waiting") as e:
        Run(plan, {"x": _matrix(), "n": np.int64(3)}, KernelContext(None, 1, print), pool=pool).execute()
    assert f"{plan.nodes[mul].name} (in the chain from {plan.nodes[head].name})" in str(e.value), str(e.value)
