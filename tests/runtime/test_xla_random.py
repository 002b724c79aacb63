"""Random draws in the XLA lowering (dfc/runtime/xla/random.py) give the numpy kernel's bits.

The n-th call of an XlaProgram draws exactly what the reference interpreter's and the fused executor's n-th
run of the graph draws: every comparison of draws here is of bits (-0.0 and 0.0 differ), in loops with data-
dependent trip counts, nested loops, conds and a draw in a loop's predicate. Values computed from the draws
by other ops (a gradient) are compared within test_xla_prototype.py's float64 tolerance, as XLA's
arithmetic elsewhere is not numpy's to the bit.
"""
import numpy as np
import pytest

import dfc
from tests.conftest import SAME_ON_EVERY_TEST_DEVICE
from dfc.runtime.kernels import philox

pytest.importorskip("jax")

from dfc.runtime.xla import program, to_jax  # noqa: E402
from dfc.runtime.xla.jops import NotLowerable  # noqa: E402

pytestmark = [pytest.mark.host_devices("the XLA lowering compiles for JAX's CPU backend"),
              SAME_ON_EVERY_TEST_DEVICE]


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    return [np.asarray(x)]


def _same_bits(got, want):
    for a, b in zip(_flat(got), _flat(want), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        assert a.tobytes() == b.tobytes(), f"{(a != b).sum()} of {a.size} elements differ"


def _runs(g, args, calls=2, prog=None):
    """The results of `calls` consecutive runs: XLA, reference interpreter, fused executor."""
    prog = prog or to_jax(g)
    ref = dfc.Session(g, mode="reference")
    fused = dfc.Session(g, mode="threads", fuse_loops=True, compile_loops=False)
    return [(prog(*args), ref.call(*args), fused.call(*args)) for _ in range(calls)]


def _check(g, *args):
    runs = _runs(g, args)
    for got, ref, fused in runs:
        _same_bits(ref, fused)
        _same_bits(got, ref)
    first, second = _flat(runs[0][0]), _flat(runs[1][0])
    assert any(a.size and not np.array_equal(a, b) for a, b in zip(first, second))      # each run draws anew
    return runs




@pytest.mark.parametrize("op", ["normal", "uniform"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_draws_of_every_size_have_the_numpy_kernels_bits(op, dtype):
    # Element counts around the boundaries the numpy side special-cases: up to SMALL elements computed with
    # Python's scalars, blocks of 4 (float32 uniforms) or 2 elements (a last block partly used), numpy passes
    # of CPU_CHUNK blocks. Unguarded, ~1% of the large draws' elements differ where XLA contracts a product
    # and a sum into one fused multiply-add.
    chunk = philox.CPU_CHUNK * philox.per_block(op == "uniform", dtype)
    sizes = [philox.SMALL, chunk + 3]
    draw, ab = (dfc.random_normal, (0.5, 2.0)) if op == "normal" else (dfc.random_uniform, (-1.5, 0.25))

    @dfc.function
    def f():
        out = [draw([n], *ab, dtype=dtype, seed=7) for n in sizes]
        # 3 x 11 = SMALL + 1 elements; a 0-d draw with a seed past 32 bits; an empty one
        return out + [draw([3, 11], dtype=dtype), draw([], dtype=dtype, seed=2 ** 40 + 3), draw([0, 4], dtype=dtype)]

    _check(f.trace())


def test_uniform_draws_stay_below_their_upper_bound():
    # float32 values of a + (b - a) u that round up to b: clamped to the largest float32 below b, as numpy does
    @dfc.function
    def f():
        return dfc.random_uniform([4096], 1.0, 1.0 + 2.0 ** -23, dtype="float32")

    (got, ref, fused), = _runs(f.trace(), (), calls=1)
    _same_bits(got, ref)
    _same_bits(fused, ref)
    assert got.max() < np.float32(1.0 + 2.0 ** -23) and (got == np.float32(1.0)).any()


@dfc.function
def _until_sum(limit):
    s = dfc.zeros([3], "float64")
    n = 0
    while dfc.reduce_sum(s) < limit:        # the trip count depends on the draws
        s = s + dfc.random_uniform([3], dtype="float64")
        n += 1
    return s, n, dfc.random_normal([2], dtype="float32")


def test_draws_in_a_while_loop_with_a_data_dependent_trip_count():
    runs = _check(_until_sum.trace(np.float64(20.0)), np.float64(20.0))
    assert runs[0][0][1] != runs[1][0][1] or not np.array_equal(runs[0][0][0], runs[1][0][0])


@dfc.function
def _nested(n):
    out = dfc.zeros([2], "float64")
    i = 0
    while i < n:
        j = 0
        while j < i + 1:            # the inner trip count varies with the outer iteration
            out = out + dfc.random_normal([2], dtype="float64", seed=1)
            j += 1
        out = out * dfc.random_uniform([2], dtype="float64", seed=2)
        i += 1
    return out


def test_draws_in_nested_loops_fold_every_frames_iteration():
    _check(_nested.trace(np.int64(4)), np.int64(4))


@dfc.function
def _in_a_cond(x, n):
    if dfc.reduce_sum(x) > 0:
        y = x + dfc.random_normal([3], dtype="float64")
    else:
        y = x - dfc.random_uniform([3], dtype="float64")
    i = 0
    while i < n:
        if dfc.reduce_sum(y) > 1.0:        # a cond inside the loop: both branches draw, one is taken
            y = y * dfc.random_uniform([3], dtype="float64", seed=5)
        else:
            y = y + dfc.random_normal([3], dtype="float64", seed=6)
        i += 1
    return y


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_draws_in_a_cond(sign):
    args = (sign * np.array([0.5, 0.25, 1.0]), np.int64(6))
    _check(_in_a_cond.trace(*args), *args)


@dfc.function
def _loop_in_a_branch(x, n):
    if dfc.reduce_sum(x) > 0:       # the loop frame may be dead: it runs under lax.cond
        i = 0
        while i < n:
            x = x + dfc.random_normal([2], dtype="float64")
            i += 1
    else:
        x = -x
    return x


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_draws_in_a_loop_inside_a_cond_branch(sign):
    args = (sign * np.array([0.5, 0.25]), np.int64(3))
    runs = _runs(_loop_in_a_branch.trace(*args), args)
    for got, ref, fused in runs:
        _same_bits(got, ref)
        _same_bits(fused, ref)


@dfc.function
def _draw_in_the_predicate():
    n = 0
    while dfc.random_uniform([], dtype="float64") < 0.9:     # drawn where the loop decides whether to go on
        n += 1
    return n


def test_a_draw_in_a_loop_predicate():
    runs = _runs(_draw_in_the_predicate.trace(), (), calls=4)
    for got, ref, fused in runs:
        _same_bits(got, ref)
        _same_bits(fused, ref)
    assert len({int(r[0]) for r in runs}) > 1


def test_consecutive_calls_draw_what_consecutive_runs_draw():
    @dfc.function
    def f():
        return dfc.random_normal([5], dtype="float64")

    g = f.trace()
    prog, ref = to_jax(g), dfc.Session(g, mode="reference")
    got = [prog() for _ in range(3)]
    want = [ref.call() for _ in range(3)]
    _same_bits(got, want)
    assert not np.array_equal(got[0], got[1]) and not np.array_equal(got[1], got[2])
    assert len(prog._fns) == 1          # the run count is an input: one compiled function for every call


@dfc.function
def _noisy_fixed_point(w, n):
    x = dfc.zeros([3], "float64")
    noise = dfc.zeros([3], "float64")
    i = 0
    while i < n:
        e = dfc.random_normal([3], 0.0, 0.1, dtype="float64")
        x = dfc.tanh(x * w + e)
        noise = noise + e
        i += 1
    return noise, dfc.gradients(dfc.reduce_sum(x * x), w)


def test_gradient_of_a_program_with_draws_in_a_loop(monkeypatch):
    monkeypatch.setattr(program, "STACK_BYTES", 0)      # stack buffers start at MIN_ROWS
    args = (np.array([0.5, -0.3, 0.8]), np.int64(program.MIN_ROWS + 6))
    g = _noisy_fixed_point.trace(*args)
    prog = to_jax(g)
    for (got_noise, got_grad), (ref_noise, ref_grad), _ in _runs(g, args, prog=prog):
        _same_bits(got_noise, ref_noise)
        np.testing.assert_allclose(got_grad, ref_grad, rtol=1e-11, atol=1e-300)
    assert prog.reruns == 1     # the first call ran again with larger stacks: the same run, the same draws


def test_a_shape_computed_in_the_graph_is_an_error_naming_the_draw():
    @dfc.function
    def f(x):
        return dfc.random_normal(dfc.stack([dfc.cast(dfc.reduce_sum(x), "int64")]), dtype="float64")

    g = f.trace(np.array([1.0, 2.0]))
    with pytest.raises(NotLowerable) as e:
        to_jax(g)(np.array([1.0, 2.0]))
    assert isinstance(e.value, dfc.DfcError) and "RandomNormal" in str(e.value)


def test_a_shape_from_an_integer_input_is_a_constant_of_the_executable():
    @dfc.function
    def f(n):
        return dfc.random_normal(dfc.stack([n]), dtype="float64")

    g = f.trace(np.int64(3))
    for n in (3, 5):
        for got, ref, _ in _runs(g, (np.int64(n),)):
            assert got.shape == (n,)
            _same_bits(got, ref)
    prog = to_jax(g)
    prog(np.int64(4))
    assert prog.static_feeds == (0,)
