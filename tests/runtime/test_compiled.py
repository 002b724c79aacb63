"""Compiled loop frames (dfc/runtime/compiled/): the same bits as the reference interpreter, the node that
blocks compiling named, errors naming their node, and the disk cache used by a second process.

Each graph here packs many ops into one loop so that one numba compile checks them all (compiling is the
slow part; the mode matrix in tests/conftest.py runs every other control-flow test compiled too)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget, frames_alone  # noqa: F401 (fixtures)
from tests.conftest import run_all_modes

# numba compiles loop frames to CPU machine code; frames on a GPU are fused instead (compile_loops has no
# effect there), so these tests of what compiles keep cpu:0 as the default device under DFC_TEST_DEVICE
# these test loop frames compiled one by one (tests/runtime/test_compiled_root.py: the whole run as one)
pytestmark = [pytest.mark.usefixtures("frames_alone"),
              pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")]

pytest.importorskip("numba")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



def _compiled(g):
    return dfc.Session(g, compile_loops=True, num_threads=0)


def _status(g):
    return {k: (v["status"], v["blocked_by"]) for k, v in _compiled(g).compiled_frames().items()}


def _math_loop(dtype):
    def f(x, n):
        def body(i, a, b, c, d):
            t = x * dfc.cast(i + 1, dtype)
            a = a + dfc.exp(t * 0.1) + dfc.log(dfc.abs(t) + 1.0) + dfc.tanh(t) + dfc.sigmoid(t)
            b = b + dfc.sin(t) * dfc.cos(t) + dfc.sqrt(dfc.abs(t)) + t ** 1.5 * 0.01 + dfc.maximum(t, -t * 0.5)
            c = c + dfc.reduce_sum(t) + dfc.reduce_mean(t, axis=0) + dfc.reduce_sum(t * t, axis=-1, keepdims=True) \
                + dfc.minimum(t, 0.25) + t // 0.3 + t % 0.7
            d = d + dfc.where(t > 0.5, t, -t) / (1.0 + dfc.reduce_max(t)) + dfc.reduce_min(t, axis=1)[0]
            return i + 1, a, b, c, d
        z = x * 0.0
        return dfc.while_loop(lambda i, a, b, c, d: i < n, body, (0, z, z, z, z))
    return f


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_and_reductions_give_numpys_bits(dtype):
    g = dfc.trace(_math_loop(dtype), dfc.TensorSpec([3, 300], dtype), dfc.TensorSpec([], "int32"))
    assert _status(g) == {"while": ("compiled", None)}
    x = np.random.default_rng(0).standard_normal((3, 300)).astype(dtype)
    run_all_modes(g, x, np.int32(4))       # exact agreement with the reference interpreter


def test_matmul_int_ops_and_nested_loops_with_conds():
    def f(w, v, n):
        def outer(i, h, k):
            h = dfc.tanh(dfc.matmul(h, w))
            j, k = dfc.while_loop(lambda j, k: j < i, lambda j, k: (j + 1, dfc.cond(k % 3 == 0, lambda: k // 3,
                                                                                     lambda: k * 5 + 1)), (0, k))
            return i + 1, h, k
        return dfc.while_loop(lambda i, h, k: i < n, outer, (0, v, np.int64(7)))
    g = dfc.trace(f, dfc.TensorSpec([16, 16], "float32"), dfc.TensorSpec([4, 16], "float32"),
                  dfc.TensorSpec([], "int64"))
    st = _status(g)
    assert st["while"] == ("compiled", None)
    rng = np.random.default_rng(1)
    w, v = rng.standard_normal((16, 16)).astype("float32") * 0.3, rng.standard_normal((4, 16)).astype("float32")
    run_all_modes(g, w, v, np.int64(6))


def _printed(i, s):
    dfc.print("s", s)       # (a Print has no lowering: codegen.NOT_LOWERED)
    return i + 1, s + dfc.reduce_sum(dfc.stack([s, s]))


def test_an_op_without_lowering_keeps_the_frame_fused_and_is_named():
    def f(n):
        return dfc.while_loop(lambda i, s: i < n, _printed, (0, 1.0))
    g = dfc.trace(f, dfc.TensorSpec([], "int32"))
    (info,) = _compiled(g).compiled_frames().values()
    assert info["status"] == "fused"
    assert g.nodes[info["blocked_by"]].op == "Print" and "no lowering" in info["reason"]
    run_all_modes(g, np.int32(5))


def test_error_inside_compiled_code_names_the_node():
    def f(a, b):
        return dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + a // (b - i)), (0, a))
    g = dfc.trace(f, dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))
    s = _compiled(g)
    assert int(s.call(np.int64(7), np.int64(10))[1]) == 7 + 0 + 0 + 0
    with pytest.raises(dfc.DfcError) as e:
        s.call(np.int64(7), np.int64(1))            # 7 // (1 - 1) in the second iteration
    floordiv = [n for n in g.nodes.values() if n.op == "FloorDiv"][0].name
    assert floordiv in str(e.value) and "division by zero" in str(e.value)


def test_compile_time_is_reported_and_the_disk_cache_serves_a_second_process(tmp_path):
    script = textwrap.dedent("""
        import json, numpy as np, dfc
        from dfc.runtime import compiled
        f = lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.5 + x), (0, x))
        g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        out = s.call(np.array([1.0, 2.0]), np.int64(50))
        info = s.compiled_frames()["while"]
        print(json.dumps({"out": out[1].tolist(), "stats": compiled.stats(), "secs": info["compile_seconds"]}))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, DFC_CACHE_DIR=str(tmp_path), DFC_COMPILE_ROOT="0")   # the frame alone
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
        assert r.returncode == 0, r.stderr
        import json
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["out"] == runs[1]["out"]
    np.testing.assert_allclose(runs[0]["out"], [2.0, 4.0])
    first, second = runs[0]["stats"], runs[1]["stats"]
    assert len(first) == len(second) == 1 and first[0]["frame"] == "while"
    assert first[0]["cached"] is False and second[0]["cached"] is True
    assert list(runs[0]["secs"].values()) and all(v > 0 for v in runs[0]["secs"].values())
    assert any(f.startswith("dfc_frame_") for f in os.listdir(tmp_path / "numba"))


def test_the_budget_caps_compiling_in_this_process(monkeypatch, tmp_path):
    """compile_loops=True compiles here, within $DFC_COMPILE_BUDGET; past it a new frame runs fused. (The
    "auto" policy compiles in a child process: tests/runtime/test_compiled_background.py.)"""
    from dfc.runtime import compiled
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))     # nothing cached: compiling is up to the policy
    frame = lambda s: next(iter(s.plan(*_signature(g2)).programs.values()))    # noqa: E731
    x = np.ones(3, np.float32)
    compiled._budget["left"] = 0.0                   # nothing left to compile: a new frame runs fused
    g2 = dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.5 - x), (0, x)),
                   dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))
    s2 = dfc.Session(g2, compile_loops=True, num_threads=0)
    np.testing.assert_array_equal(s2.call(x, np.int64(3))[1], dfc.Session(g2, mode="reference").call(x, np.int64(3))[1])
    assert not frame(s2)._compiled_once


def _signature(g):
    from dfc.ir import structure
    sig = g.signature
    return ([leaf["ref"] for leaf in structure.leaves(sig.get("outputs"))], [i["node"] for i in sig["inputs"]],
            tuple(sig.get("targets", [])))


def test_values_the_compiled_code_cannot_take_run_fused():
    g = dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x), (0, x)),
                  dfc.TensorSpec([None], "float64"), dfc.TensorSpec([], "int64"))
    s = _compiled(g)
    x = np.arange(6.0)[::2]                       # not contiguous: copied in
    np.testing.assert_array_equal(s.call(x, np.int64(3))[1], x * 4)
    ro = np.arange(3.0)
    ro.flags.writeable = False                    # read-only: copied in, never written
    np.testing.assert_array_equal(s.call(ro, np.int64(2))[1], ro * 3)
    assert ro.tolist() == [0.0, 1.0, 2.0]


def test_forward_and_gradient_loops_compile_with_their_stacks():
    def f(x, n):
        i, y = dfc.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, dfc.tanh(y) * x), (0, x))
        return y, dfc.gradients(y, [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int32"))
    assert _status(g) == {"while": ("compiled", None), "while_grad": ("compiled", None)}
    run_all_modes(g, np.array([0.5, -0.3, 1.2]), np.int32(5))


def test_gradient_loops_of_a_cond_compile_and_mix_with_fused_ones(monkeypatch):
    def f(x, n):
        def body(i, y):
            y = dfc.cond(dfc.reduce_sum(y) > 0.0, lambda: dfc.tanh(y) * x, lambda: y * y - x)
            return i + 1, y
        i, y = dfc.while_loop(lambda i, y: i < n, body, (0, x))
        return y, dfc.gradients(dfc.reduce_sum(y), [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int32"))
    # the forward loop pushes values computed in one branch, lifted out with a scalar dummy from the other
    # (a Merge of unknown rank): compiled code pushes a placeholder of the value's type instead
    assert _status(g) == {"while": ("compiled", None), "while_grad": ("compiled", None)}
    x = np.array([0.5, -0.3, 1.2])
    y, dx = run_all_modes(g, x, np.int32(6))
    eps = 1e-6
    num = [(float(np.sum(dfc.Session(g).call(x + eps * e, np.int32(6))[0]))
            - float(np.sum(dfc.Session(g).call(x - eps * e, np.int32(6))[0]))) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(dx, num, rtol=1e-5, atol=1e-8)
    # a fused gradient loop pops the placeholders a compiled forward loop pushed, and never reads them
    from dfc.runtime import compiled
    run = compiled.CompiledFrame.fn
    ran = []

    def forward_only(self, ctx, kern, vals, tag):
        ran.append(self.name)
        return self.prog.fn(ctx, kern, vals, tag) if self.name == "while_grad" else run(self, ctx, kern, vals, tag)
    monkeypatch.setattr(compiled.CompiledFrame, "fn", forward_only)
    got = _compiled(g).call(x, np.int32(6))
    assert sorted(ran) == ["while", "while_grad"]
    np.testing.assert_array_equal(got[0], y)
    np.testing.assert_array_equal(got[1], dx)


def test_dfc_show_fused_says_which_frames_compile_and_what_blocks_the_others(tmp_path):
    def f(x, n):
        a = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.5 + x), (0, x))[1]
        b = dfc.while_loop(lambda i, s: i < n, _printed, (0, x))[1]
        return a, b
    g = dfc.trace(f, dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "int64"))
    dfc.save(g, str(tmp_path / "g.json"))
    r = subprocess.run([sys.executable, "-m", "dfc.cli", "show", "--fused", str(tmp_path / "g.json")],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    assert r.returncode == 0, r.stderr
    printer = [n.name for n in g.nodes.values() if n.op == "Print"][0]
    assert r.stdout.count("# compile_loops: compiled with numba") == 1
    assert f"# compile_loops: not compiled, blocked by {printer} (Print): op Print has no lowering" in r.stdout


def test_matrix_vector_products_give_numpys_bits():
    def f(w, v, n):
        def body(i, x, y, z):
            return i + 1, dfc.tanh(dfc.matmul(w, x) + 0.1), dfc.matmul(y, w) * 0.5, z + dfc.matmul(x, y)
        return dfc.while_loop(lambda i, x, y, z: i < n, body, (0, v, v, dfc.reduce_sum(v) * 0.0))
    g = dfc.trace(f, dfc.TensorSpec([24, 24], "float64"), dfc.TensorSpec([24], "float64"),
                  dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None)}
    rng = np.random.default_rng(2)
    run_all_modes(g, rng.standard_normal((24, 24)) * 0.2, rng.standard_normal(24), np.int64(5))
