"""Retraces of loops whose weakly typed variables settle, and the builder's mark/rollback.

`s = 0` then `s += x` (x float32) traces a loop body twice: once with an int64 `s`, once with
the float32 it settles to. A loop nested in that body is built again by the second trace; it
must start from what it settled to before, so the body traces grow linearly with the nesting
depth, not as 2 ** depth.
"""
import importlib.util
import itertools

import numpy as np
import pytest

import dfc
from dfc.compiler.tracing import Builder, building


def _nest_of_while_loops(depth, traces):
    """Each level: i, s = 0, 0; while i < 2: s += (the level below, or x); i += 1."""
    def f(x):
        def level(d):
            def body(i, s):
                traces[d] = traces.get(d, 0) + 1
                inner = level(d + 1) if d + 1 < depth else x
                return i + 1, s + inner
            return dfc.while_loop(lambda i, s: i < 2, body, (0, 0))[1]
        return level(0)
    return dfc.trace(f, dfc.TensorSpec([], "float32"))


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_nested_while_loops_with_weak_variables_retrace_linearly(depth):
    traces = {}
    g = _nest_of_while_loops(depth, traces)
    # each level: 2 traces of its own, plus one per level around it (was 2 ** (level + 1))
    assert traces == {d: d + 2 for d in range(depth)}
    assert float(g(np.float32(1.5))) == 1.5 * 2 ** depth


def _converted(tmp_path, depth, ticks):
    """A dfc.function of `depth` nested Python while loops, each with `s = 0` weakly typed."""
    lines, ind = ["def f(x, n):"], "    "
    for d in range(depth):
        lines += [f"{ind}s{d} = 0", f"{ind}i{d} = 0", f"{ind}while i{d} < n:"]
        ind += "    "
        lines.append(f"{ind}traced({d})")
    lines.append(f"{ind}s{depth - 1} += x")
    for d in reversed(range(depth)):
        lines.append(f"{ind}i{d} += 1")
        ind = ind[:-4]
        if d > 0:
            lines.append(f"{ind}s{d - 1} += s{d}")
    lines.append(f"{ind}return s0")
    path = tmp_path / f"nest{depth}.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(f"nest{depth}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.traced = lambda d: next(ticks[d])   # (a loop body may not change a dict from outside)
    return dfc.function(module.f), module.f


def test_nested_python_loops_in_a_function_retrace_linearly(tmp_path):
    ticks = [itertools.count() for _ in range(3)]
    f, plain = _converted(tmp_path, 3, ticks)
    got = f(np.float32(1.5), np.int32(2))
    assert [next(t) for t in ticks] == [2, 3, 4]          # was [2, 4, 8]
    want = plain(np.float32(1.5), 2)
    assert float(got) == float(want) == 1.5 * 8


def test_a_settled_type_is_not_reused_when_the_body_sees_other_captured_types():
    """The inner loop settles `u` to float64 in the outer body's first trace (t is int64 there);
    in the second trace (t float32) its body keeps u's own dtype, so u stays int64, as it would
    without the earlier trace."""
    inner_dtypes = []

    def f(x):
        def outer_body(i, t):
            def inner_body(j, u):
                if t.dtype == "int64":
                    return j + 1, u + 0.5
                return j + 1, u + dfc.cast(t, u.dtype) * 0 + 1
            _, u = dfc.while_loop(lambda j, u: j < 2, inner_body, (0, 0))
            inner_dtypes.append(u.dtype)
            return i + 1, t + x + dfc.cast(u, "float32")
        return dfc.while_loop(lambda i, t: i < 2, outer_body, (0, 0))

    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    assert inner_dtypes == ["float64", "int64"]      # u = 0; u + 0.5 is float64, as in numpy
    i, t = g(np.float32(1.5))
    assert (int(i), float(t)) == (2, 2 * (1.5 + 2))


def test_rollback_restores_the_builder():
    b = Builder("g")
    with building(b):
        x = dfc.constant(1.0)
        before = (list(b.graph.nodes), dict(b.last_effect), b.effect_count, dict(b.conds), dict(b.loops))
        mark = b.mark()
        s = dfc.cond(x > 0, lambda: x + 1, lambda: x - 1)
        dfc.while_loop(lambda v: v < 10, lambda v: v * 2, s)
        dfc.print(s)
        assert b.conds and b.loops and b.effect_count == before[2] + 1
        b.rollback(mark)
        assert (list(b.graph.nodes), dict(b.last_effect), b.effect_count, dict(b.conds), dict(b.loops)) == before
        assert set(b.tensors) == set(b.graph.nodes)
        again = dfc.cond(x > 0, lambda: x + 1, lambda: x - 1)
        assert again.node != s.node           # names are not reused: old Tensors never name new nodes
