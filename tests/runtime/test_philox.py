"""Random draws: Philox4x32-10 against the published vectors, one stream in numpy and in numba (bit for bit),
its distributions, and draws inside loops on every path, compiled natively."""
import numpy as np
import pytest

import dfc
from dfc.runtime.kernels import philox as X
from tests.compiledtools import _no_compile_budget  # noqa: F401 (fixture)
from tests.conftest import run_all_modes

# Random123's kat_vectors, philox4x32 with 10 rounds: (counter, key) -> output
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.parametrize("counter,key,want", KAT)
def test_known_answers(counter, key, want):
    assert X.philox(counter, key) == want
    arrays = X.philox(tuple(np.array([c], np.uint64) for c in counter), key)
    assert tuple(int(w[0]) for w in arrays) == want


@pytest.mark.parametrize("counter,key,want", KAT)
def test_known_answers_numba(counter, key, want):
    pytest.importorskip("numba")
    from dfc.runtime.kernels import philox_numba as N
    got = N.block(*(np.uint64(v) for v in counter + key))
    assert tuple(int(w) for w in got) == want


def _numba_draw(uniform, n, dtype, a, b, key, h):
    from dfc.runtime.kernels import philox_numba as N
    out = np.empty(n, dtype)
    words = [np.uint64(v) for v in key + h]
    if uniform:
        top = X.top_below(a, b, dtype)
        N.uniform_into(out, *words, a, b, 0.0 if top is None else float(top), top is not None)
    else:
        N.normal_into(out, *words, a, b)
    return out


def test_numpy_and_numba_give_the_same_bits():
    """Many keys, counters, sizes (more than one numpy chunk among them), bounds and both dtypes."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(0)
    sizes = [0, 1, 2, 3, 4, 5, 7, 31, 2 * X.CPU_CHUNK * 4 + 3] + [int(v) for v in rng.integers(0, 300, 40)]
    for k, n in enumerate(sizes):
        key = tuple(int(v) for v in rng.integers(0, 2 ** 32, 2))
        h = tuple(int(v) for v in rng.integers(0, 2 ** 32, 2))
        a, b = float(rng.normal()), float(rng.exponential()) + 1e-3
        if k == 3:
            a, b = 1.0, 1.0 + 2 ** -21      # float32 values round up to b: clamped
        for dtype in ("float32", "float64"):
            for uniform in (True, False):
                want = X.draw(np, uniform, n, dtype, a, b, key, h)
                got = _numba_draw(uniform, n, dtype, a, b, key, h)
                assert want.dtype == got.dtype == np.dtype(dtype)
                assert want.tobytes() == got.tobytes(), (n, dtype, uniform)


def test_own_log_sin_cos_are_within_an_ulp_or_two_of_numpys():
    """The stream's log, sin and cos (fdlibm's polynomials, so every path computes them alike) are accurate:
    checked against numpy's on their whole domains."""
    rng = np.random.default_rng(1)
    x = np.concatenate([(rng.integers(0, 2 ** 53, 100_000, dtype=np.uint64) + 1) * X.F53, [X.F53, 0.5, 1.0]])
    ulps = np.abs(X._log(np, x) - np.log(x)) / np.spacing(np.abs(np.log(x)) + 1e-300)
    assert ulps.max() <= 2 and X._log(np, np.array([1.0]))[0] == 0.0
    th = np.linspace(-np.pi / 4, np.pi / 4, 100_001)
    assert (np.abs(X.sin_kernel(th) - np.sin(th)) <= 2 * np.spacing(np.abs(np.sin(th)))).all()
    assert (np.abs(X.cos_kernel(th) - np.cos(th)) <= 2 * np.spacing(np.cos(th))).all()


def test_normals_are_box_muller_of_their_block():
    """Element 2j, 2j + 1 = r cos t, r sin t of block j, as numpy's own log, cos and sin compute them
    (to a few ulps: the stream's functions are its own)."""
    x0, x1, x2, x3 = X.philox((np.arange(500, dtype=np.uint64), 0, 3, 4), (1, 2))
    u1 = (X._bits53(x0, x1) + 1).astype(np.float64) * X.F53
    t = 2 * np.pi * X._bits53(x2, x3).astype(np.float64) * X.F53
    r = np.sqrt(-2 * np.log(u1))
    want = np.stack([r * np.cos(t), r * np.sin(t)], axis=1).ravel()
    np.testing.assert_allclose(X.draw(np, False, 1000, "float64", 0.0, 1.0, (1, 2), (3, 4)), want, rtol=1e-13,
                               atol=1e-14)


def test_tag_words_agree():
    pytest.importorskip("numba")
    from dfc.runtime.kernels import philox_numba as N
    R, chain = np.array([7, 1, 3], np.int64), np.array([2, 5], np.int64)
    assert tuple(int(v) for v in N.tag_words(R, chain)) == X.tag_words(7, (1, 3, 2, 5))
    # different iterations, nestings and runs: different counters
    words = {X.tag_words(r, t) for r in range(3) for t in [(), (1, 0), (1, 1), (0, 1), (1, 0, 2, 0), (1, 0, 2, 1)]}
    assert len(words) == 18


def test_elements_do_not_depend_on_the_draws_size():
    """Element i is a function of i: a longer draw extends a shorter one (counter = element block); small
    draws (Python's scalars) and larger ones (numpy's arrays, in chunks) give the same bits."""
    for uniform in (True, False):
        for dtype in ("float32", "float64"):
            long = X.draw(np, uniform, 2 * X.CPU_CHUNK * 4 + 5, dtype, -1.0, 3.0, (5, 6), (7, 8))
            for n in (0, 1, 2, 3, 5, 13, X.SMALL, X.SMALL + 1, 1000):
                short = X.draw(np, uniform, n, dtype, -1.0, 3.0, (5, 6), (7, 8))
                assert short.tobytes() == long[:n].tobytes(), (uniform, dtype, n)


def test_uniform_range_and_moments():
    n = 200_000
    for dtype in ("float32", "float64"):
        u = X.draw(np, True, n, dtype, -2.0, 3.0, X.key_of(1, "u"), X.tag_words(0, ()))
        assert u.dtype == np.dtype(dtype) and u.min() >= -2.0 and u.max() < 3.0
        assert abs(u.mean() - 0.5) < 0.03 and abs(u.var() - 25 / 12) < 0.03
        hist = np.histogram(u, bins=10, range=(-2.0, 3.0))[0]
        assert hist.min() > 0.95 * n / 10 and hist.max() < 1.05 * n / 10
    # a range narrower than float32's spacing there: every value is below b
    u = X.draw(np, True, 1000, "float32", 1.0, 1.0 + 2 ** -30, (1, 2), (3, 4))
    assert (u == np.float32(1.0)).all()
    u = X.draw(np, True, 5000, "float32", 1.0, 1.0 + 2 ** -22, (1, 2), (3, 4))
    assert u.max() < 1.0 + 2 ** -22 and len(set(u.tolist())) == 2


def test_normal_moments():
    n = 200_000
    for dtype in ("float32", "float64"):
        z = X.draw(np, False, n, dtype, 1.5, 2.0, X.key_of(2, "z"), X.tag_words(0, ()))
        assert z.dtype == np.dtype(dtype) and np.isfinite(z).all()
        s = (z.astype(np.float64) - 1.5) / 2.0
        assert abs(s.mean()) < 0.01 and abs(s.var() - 1) < 0.02
        assert abs(np.mean(s ** 3)) < 0.03 and abs(np.mean(s ** 4) - 3) < 0.1
        assert abs(np.mean(np.abs(s) < 1) - 0.6827) < 0.005
        assert abs(np.corrcoef(s[0::2], s[1::2])[0, 1]) < 0.01   # the pairs of one block are independent


def test_seed_and_node_and_run_change_the_numbers():
    assert X.key_of(0, "a") != X.key_of(1, "a") != X.key_of(1, "b")
    assert X.key_of(5, "a") == (5, X.key_of(0, "a")[1])                 # a 32-bit seed is its own word
    assert X.key_of(2 ** 32 + 5, "a") != X.key_of(5, "a")
    assert X.key_of(-1, "a") != X.key_of(0, "a")


def _loop_program():
    def f(n, m):
        def outer(i, s):
            def inner(j, s):
                return j + 1, s + dfc.random_normal([2, 3], mean=1.0, stddev=0.5, dtype="float64", seed=3)
            _, s = dfc.while_loop(lambda j, s: j < m, inner, (0, s))
            u = dfc.random_uniform([3], minval=0.5, maxval=1.5, dtype="float32", seed=4)
            return i + 1, s * dfc.cast(u, "float64") + dfc.random_normal([], dtype="float64")
        s = dfc.while_loop(lambda i, s: i < n, outer, (0, dfc.zeros([2, 3], "float64")))[1]
        return s + dfc.random_normal([2, 3], dtype="float64", seed=9)     # a draw at the run's root too
    return dfc.trace(f, dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))


def test_draws_in_loops_agree_on_every_path():
    g = _loop_program()
    first = run_all_modes(g, np.int64(3), np.int64(2))
    assert np.isfinite(first).all() and len(set(first.ravel().tolist())) == 6
    ref = dfc.Session(g, mode="reference")
    assert not np.array_equal(ref.call(np.int64(3), np.int64(2)), ref.call(np.int64(3), np.int64(2)))


@pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")
def test_loops_with_draws_compile_natively():
    """No object mode: the run's function (its loops inlined; the same source as run_all_modes' compiled path
    above, so no second compile) is nopython and nogil, and its draws are philox_numba's."""
    pytest.importorskip("numba")
    g = _loop_program()
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    run = s.compiled_run()
    assert (run["status"], run["blocked_by"]) == ("compiled", None)
    src = run["source"]
    assert "objmode" not in src and "kernel_call" not in src and "nogil=True" in src
    assert src.count("H.philox_normal(") == 3 and src.count("H.philox_uniform(") == 1
    ref = dfc.Session(g, mode="reference")
    for _ in range(2):
        np.testing.assert_array_equal(s.call(np.int64(3), np.int64(2)), ref.call(np.int64(3), np.int64(2)))
    from dfc.runtime import compiled
    from dfc.runtime.compiled import cache
    key = cache.module_key(src)         # compiled (or loaded) in this process, here or by run_all_modes above
    assert any(st["key"] == key for st in compiled.stats()), "the run's compile failed: it ran fused"


def test_a_negative_dimension_is_an_error_naming_the_node():
    def f(k):
        return dfc.random_uniform(dfc.stack([k, 2]), seed=1)
    g = dfc.trace(f, dfc.TensorSpec([], "int32"))
    with pytest.raises(dfc.DfcError, match="negative dimension") as e:
        dfc.Session(g).call(np.int32(-1))
    assert [n for n in g.nodes if g.nodes[n].op == "RandomUniform"][0] in str(e.value)
