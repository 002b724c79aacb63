"""dfc.function keeps Python's meaning in loops, containers, strings and builtins (issue 9, part 2).

Valid programs are checked against running the same function as plain Python
(on Python scalars / numpy arrays); invalid ones must raise a DfcError that
names this file's line.
"""
import random
import warnings

import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from dfc.compiler.autograph.errors import DfcTraceTimeRandomWarning
from dfc.errors import DfcAssertionError, DfcConversionError, DfcTypeError
from tests.compiler._autograph import _check, _py, expect, f32, i32, line_of, stack


# ------------------------------------------------------------------ helpers
def same_as_python(fn, *arg_sets, all_modes=None):
    converted = function(fn)
    for args in arg_sets:
        expected = fn(*[_py(a) for a in args])
        if all_modes is not None:
            specs = [dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args]
            actual = all_modes(converted.trace(*specs), *args)
        else:
            actual = converted(*args)
        _check(actual, expected, rtol=1e-6, atol=0)


# ------------------------------------------------------------------ 1. containers in tensor loops
def test_list_used_as_a_stack_in_a_tensor_loop(all_modes):
    def f(n):
        st = [0]
        i = 1
        total = 0
        while i < n:
            if i % 3 == 0:
                total += st.pop()
            else:
                st.append(i)
            i += 1
        return total, len(st), stack(st)
    same_as_python(f, (i32(10),), (i32(1),), (i32(4),), all_modes=all_modes)


def test_pop_with_index_and_as_a_statement():
    def f(n):
        xs = [10, 20, 30, 40, 50]
        s = 0
        i = 0
        while i < n:
            s = s + xs.pop(1) * 2
            xs.pop()
            i += 1
        return s, len(xs), stack(xs)
    same_as_python(f, (i32(2),), (i32(0),))


def test_list_that_starts_empty_pushed_and_popped():
    def f(n):
        st = []
        i = 0
        while i < n:
            st.append(i * 10)
            st.append(i)
            v = st.pop()
            st[0] = st[0] + v
            i += 1
        return st[0], st[-1], len(st)
    same_as_python(f, (i32(3),), (i32(1),))


def test_gradient_through_a_list_popped_in_a_tensor_loop():
    def f(x, n):
        xs = [x]
        i = 0
        while i < n:
            xs.append(xs[-1] * 2.0)
            if i % 2 == 1:
                xs.pop(0)
            last = xs[-1] * x
            i += 1
        return last + sum(xs) if isinstance(x, float) else last + dfc.reduce_sum(dfc.stack(xs))

    def value_and_grad(x, n):
        y = f(x, n)
        return y, dfc.gradients(y, x)
    y, g = function(value_and_grad)(np.float64(1.5), i32(4))
    eps = 1e-6
    assert y == f(1.5, 4)
    np.testing.assert_allclose(g, (f(1.5 + eps, 4) - f(1.5 - eps, 4)) / (2 * eps), rtol=1e-6)


def test_pop_after_the_loop_that_built_the_list():
    def f(n):
        total = 0
        for k in range(n):
            xs = []
            for i in range(k + 1):
                xs.append(i * 3)
            total += xs.pop()
        ys = []
        for i in range(n):
            ys.append(i)
        return total, ys.pop(), ys.pop(0), len(ys), stack(ys)
    same_as_python(f, (i32(4),))


def test_pop_in_a_tensor_if_of_a_list_the_loop_only_appended_to_is_an_error():
    def f(n):
        xs = []
        for i in range(n):
            xs.append(i)
        v = 0
        if n > 2:
            v = xs.pop()  # MARK
        return v
    expect(DfcConversionError, f, (i32(4),), "# MARK", "dfc.stack(xs)")


def test_pop_from_an_empty_list_fails_at_run_time():
    def f(n):
        st = [1, 2]
        i = 0
        while i < n:
            st.pop()  # MARK
            i += 1
        return len(st)
    assert function(f)(i32(2)) == 0
    expect(DfcAssertionError, f, (i32(3),), "# MARK", "pop from empty list")


def test_list_extend_in_a_tensor_loop():
    def f(x, n):
        xs = [x[0]]
        i = 0
        while i < n:
            xs.extend(x * i)           # the rows of a tensor
            xs.extend([x[1], x[0]])    # a Python list of tensors
            i += 1
        return stack(xs), len(xs)
    same_as_python(f, (np.array([1.0, 2.0], f32), i32(3)), (np.array([1.0, 2.0], f32), i32(0)))


def test_extend_by_a_list_built_in_another_loop():
    def f(n):
        a = []
        for i in range(n):
            a.append(i * 2)
        b = [7]
        for j in range(n):
            b.extend(a)
        return stack(b), len(b)
    same_as_python(f, (i32(3),), (i32(0),))


def test_item_assignment_with_a_tensor_index(all_modes):
    def f(n, x):
        xs = [x, x * 2, x * 3]
        i = 0
        while i < n:
            xs[i % 3] = x * i
            xs[-1] += 1.0
            i += 1
        return xs[0], xs[1], xs[2]
    same_as_python(f, (i32(5), f32(1.5)), (i32(0), f32(1.5)), all_modes=all_modes)


def test_item_assignment_index_out_of_range_fails_at_run_time():
    def f(n, x):
        xs = [x, x]
        i = 0
        while i < n:
            xs[i] = x * 2  # MARK
            i += 1
        return xs[0]
    assert function(f)(i32(2), f32(1.0)) == 2.0
    expect(DfcAssertionError, f, (i32(3), f32(1.0)), "# MARK", "index out of range")


def test_del_item_in_a_tensor_loop():
    def f(n):
        xs = [10, 20, 30, 40]
        i = 0
        while i < n:
            del xs[0]
            i += 1
        return len(xs), xs[0], stack(xs)
    same_as_python(f, (i32(2),), (i32(0),))


def test_dict_entry_first_set_in_a_tensor_loop():
    def f(n):
        d = {}
        i = 0
        while i < n:
            d["last"] = i * 3
            i += 1
        return d["last"]
    same_as_python(f, (i32(4),))


def test_set_add_in_a_tensor_loop_is_an_error():
    def f(n):
        seen = set()
        i = 0
        while i < n:
            seen.add(1)  # MARK
            i += 1
        return len(seen)
    expect(DfcConversionError, f, (i32(3),), "# MARK", "set.add()", "once per iteration")


def test_dict_update_in_a_tensor_loop_is_an_error():
    def f(n):
        d = {"a": 0}
        i = 0
        while i < n:
            d.update(b=1)  # MARK
            i += 1
        return d["a"]
    expect(DfcConversionError, f, (i32(3),), "# MARK", "dict.update()")


LOG = []


def test_append_to_a_global_list_in_a_tensor_loop_is_an_error():
    def f(n):
        i = 0
        while i < n:
            LOG.append(1)  # MARK
            i += 1
        return i
    expect(DfcConversionError, f, (i32(3),), "# MARK", "list.append()", "dfc.TensorArray")
    assert LOG == []


def _append_to(xs, v):
    xs.append(v)  # MARK
    return v


def test_append_in_a_helper_to_a_list_from_outside_the_loop_is_an_error():
    def f(n):
        out = []
        i = 0
        while i < n:
            _append_to(out, i)
            i += 1
        return len(out)
    with pytest.raises(DfcConversionError, match="list.append") as info:
        function(f)(i32(3))
    assert f"test_autograph_semantics_loops.py:{line_of(_append_to, '# MARK')}" in str(info.value)


def test_containers_made_inside_the_loop_body_may_change():
    def f(n, x):
        i = 0
        total = 0.0
        while i < n:
            parts = []
            seen = set()
            for k in range(3):
                parts.append(x * k)
                seen.add(k)
            parts.pop()
            total += parts[1] + len(seen)
            i += 1
        return total
    same_as_python(f, (i32(3), f32(2.0)), (i32(0), f32(2.0)))


def test_pop_inside_an_expression_that_may_not_run_is_an_error():
    def f(n):
        xs = [1, 2, 3]
        i = 0
        s = 0
        while i < n:
            xs.append(i)
            s = s + (xs.pop() if i > 100 else 0)  # MARK
            i += 1
        return s
    expect(DfcConversionError, f, (i32(3),), "# MARK", "xs.pop()")


# ------------------------------------------------------------------ 2. dfc.stack(axis=...)
def test_stack_axis_of_a_list_built_in_a_tensor_loop():
    def f(n, v):
        xs = []
        for i in range(n):
            xs.append(v * i)
        return stack(xs), stack(xs, axis=1), stack(xs, axis=-1)
    same_as_python(f, (i32(3), np.array([1.0, 2.0], f32)))


def test_stack_axis_out_of_bounds():
    def f(n, v):
        xs = []
        for i in range(n):
            xs.append(v * i)
        return dfc.stack(xs, axis=2)  # MARK
    expect(DfcTypeError, f, (i32(3), np.array([1.0, 2.0], f32)), "# MARK", "out of bounds")


# ------------------------------------------------------------------ 3. range() of a float
def test_range_of_a_float_tensor_is_an_error():
    def f(x):
        s = 0.0
        for i in range(x):  # MARK
            s += 1.0
        return s
    with pytest.raises(TypeError):
        f(3.0)      # plain Python
    expect(DfcTypeError, f, (f32(3.0),), "# MARK", "range()", "dfc.cast")


# ------------------------------------------------------------------ 4. loops of side effects only
def test_while_loop_with_only_side_effects(all_modes):
    v = dfc.Variable(np.int32(0), name="side_effect_counter")

    def f(n):
        while v.read_value() < n:
            v.assign_add(2)
        return v.read_value()
    g = function(f).trace(dfc.TensorSpec([], "int32"))
    v.assign(np.int32(0))
    assert all_modes(g, i32(7)) == 8
    # the condition reads the variable after the previous iteration's assignment
    loop_reads = [n for n in g.nodes.values() if n.op == "ReadVariable"
                  and g.nodes[n.inputs[0].split(":")[0]].op == "Enter"]
    assert loop_reads and all(any(i.startswith("^") for i in n.inputs) for n in loop_reads)


def test_for_loop_with_only_side_effects(all_modes):
    v = dfc.Variable(np.float32(0), name="side_effect_sum")

    def f(x):
        for row in x:
            v.assign_add(dfc.reduce_sum(row))
        return v.read_value()
    g = function(f).trace(dfc.TensorSpec([None, 2], "float32"))
    v.assign(np.float32(1))
    assert all_modes(g, np.ones((3, 2), f32)) == 7.0


# ------------------------------------------------------------------ 5. weak loop results in a TensorArray
def test_tensor_array_write_of_a_weakly_typed_loop_result():
    def f(n):
        s = 0
        i = 0
        while i < n:
            s = s * 10 + i
            i += 1
        a = dfc.TensorArray("int32")
        a = a.write(0, s)
        return a.stack()
    out = function(f)(i32(4))
    assert out.dtype == np.int32 and out.tolist() == [123]


def test_tensor_array_refuses_a_lossy_weak_value():
    def f(n):
        s = 0.5
        i = 0
        while i < n:
            s = s * 2
            i += 1
        a = dfc.TensorArray("int32")
        a = a.write(0, s)  # MARK
        return a.stack()
    expect(DfcTypeError, f, (i32(3),), "# MARK", "float32", "int32")


# ------------------------------------------------------------------ 6. variables first set in a loop
def test_variable_first_set_in_a_tensor_loop():
    def f(n):
        i = 0
        while i < n:
            last = i * 2
            i += 1
        return last
    same_as_python(f, (i32(3),), (i32(1),))


def test_variable_first_set_in_a_loop_that_runs_zero_times():
    def f(n):
        i = 0
        while i < n:  # MARK
            last = i * 2
            i += 1
        return last
    with pytest.raises(NameError):
        f(0)        # plain Python: UnboundLocalError
    expect(DfcAssertionError, f, (i32(0),), "# MARK", "'last'", "zero times")


def test_variable_first_set_in_an_inner_loop(all_modes):
    def f(n, m):
        i = 0
        s = 0
        while i < n:
            j = 0
            while j < m - i:  # MARK
                last = j * 10 + i
                j += 1
            s += last       # valid while some earlier inner loop has set `last`
            i += 1
        return s
    same_as_python(f, (i32(3), i32(2)), (i32(4), i32(3)), all_modes=all_modes)
    with pytest.raises(NameError):
        f(3, 0)
    expect(DfcAssertionError, f, (i32(3), i32(0)), "# MARK", "'last'", "zero times")


def test_for_target_and_body_variables_after_a_tensor_for():
    def f(x):
        for i in range(x.shape[0] - 1, dfc.shape(x)[0] if isinstance(x, dfc.Tensor) else len(x)):
            row = x[i] * 2
        return i, row
    same_as_python(f, (np.array([1.0, 2.0, 3.0], f32),))


def test_variable_first_set_in_a_loop_not_used_after_it_is_fine():
    def f(n):
        i = 0
        while i < n:
            tmp = i * 2
            i += tmp - tmp + 1
        return i
    same_as_python(f, (i32(0),), (i32(3),))


# ------------------------------------------------------------------ 7. str() and f-strings of tensors
def test_print_of_an_f_string_prints_when_the_graph_runs(capsys):
    def f(x, n):
        i = 0
        while i < n:
            print(f"step {i}: x={x * i}!", "end")
            i += 1
        return i
    g = function(f)
    capsys.readouterr()
    g(f32(1.5), i32(2))
    assert capsys.readouterr().out == "step 0: x=0.0! end\nstep 1: x=1.5! end\n"


def test_f_strings_of_python_values_are_python_f_strings():
    def f(x):
        name, width, value = "loss", 8, 3.14159
        text = f"{name!r:>{width}}|{value:.2f}|{value=}|{'nested ' + f'{width:03d}'}"
        return x + len(text)
    same_as_python(f, (f32(1.0),))


def test_str_of_a_tensor_is_an_error():
    def f(x):
        s = str(x)  # MARK
        return x
    expect(DfcTypeError, f, (f32(1.0),), "# MARK", "dfc.print")


def test_using_an_f_string_of_a_tensor_as_text_is_an_error():
    def f(x):
        s = f"value {x}"
        n = len(s)  # MARK
        return x + n
    expect(DfcConversionError, f, (f32(1.0),), "# MARK", "only be printed")


def test_format_spec_on_a_tensor_is_an_error():
    def f(x):
        print(f"value {x:.3f}")  # MARK
        return x
    expect(DfcConversionError, f, (f32(1.0),), "# MARK", ":.3f")


def test_str_of_a_tensor_in_dfc_trace_is_an_error():
    def f(x):
        return dfc.constant(len(f"{x}"))  # MARK
    with pytest.raises(DfcTypeError) as info:
        dfc.trace(f, dfc.TensorSpec([], "float32"))
    assert f"test_autograph_semantics_loops.py:{line_of(f, '# MARK')}" in str(info.value)


# ------------------------------------------------------------------ 8. random numbers while tracing
def test_numpy_random_inside_dfc_function_warns():
    def f(x):
        return x + np.random.rand()  # MARK
    with pytest.warns(DfcTraceTimeRandomWarning, match="dfc.random_uniform") as record:
        function(f)(f32(1.0))
    w = record[0]
    assert w.filename == __file__ and w.lineno == line_of(f, "# MARK")


def test_python_random_inside_dfc_function_warns():
    def f(x):
        rng = np.random.default_rng(0)
        return x + random.random() + rng.normal()  # MARK
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        function(f)(f32(1.0))
    mine = [w for w in record if issubclass(w.category, DfcTraceTimeRandomWarning)]
    assert len(mine) == 2 and all(w.lineno == line_of(f, "# MARK") for w in mine)


def test_no_warning_without_random_numbers():
    def f(x):
        return x + dfc.random_uniform([])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DfcTraceTimeRandomWarning)
        function(f)(f32(1.0))


# ------------------------------------------------------------------ 9. Python errors and builtins
def test_numpy_methods_on_tensors():
    def f(x):
        return x.max(), x.min(axis=0), x.prod(), x.any(), x.all(), x.argmax(), x.argmin(axis=1)
    same_as_python(f, (np.array([[1.0, -2.0], [3.0, 0.5]], f32),))


def test_builtins_on_tensors():
    def f(x, y, v):
        return (max(x, y), min(x, y, 0.5), max(v), min(v), sum(v), sum(v, 10.0), abs(x - y),
                any(v > 2), all(v > 2), len(v), max([x, y]))
    same_as_python(f, (f32(1.5), f32(-2.0), np.array([3.0, 1.0, 2.0], f32)))


def test_len_of_a_tensor_with_unknown_first_dimension_is_a_tensor():
    def f(v):
        return len(v) * 2
    g = function(f).trace(dfc.TensorSpec([None], "float32"))
    assert g(np.ones(5, f32)) == 10


def test_builtin_max_of_a_matrix_is_an_error():
    def f(m):
        return max(m)  # MARK
    with pytest.raises(ValueError):
        f(np.ones((2, 2)))      # plain Python: the truth value of a row is ambiguous
    expect(DfcTypeError, f, (np.ones((2, 2), f32),), "# MARK", "dfc.reduce_max")


def test_numpy_function_on_a_tensor_is_an_error():
    def f(x):
        return np.tanh(x)  # MARK
    expect(DfcTypeError, f, (np.ones(3, f32),), "# MARK", "numpy.tanh()", "dfc.tanh")


def test_numpy_array_function_on_a_tensor_is_an_error():
    def f(x):
        return np.sum(x)  # MARK
    expect(DfcTypeError, f, (np.ones(3, f32),), "# MARK", "dfc.reduce_sum")


def test_numpy_operators_still_work_with_tensors():
    def f(x):
        a = np.array([1.0, 2.0, 3.0], np.float32)
        return a + x, a * x, a < x, np.float32(2.0) ** x
    same_as_python(f, (np.array([2.0, 1.0, 4.0], f32),))


def test_item_assignment_to_a_tensor_is_an_error():
    def f(x):
        x[0] = 1.0  # MARK
        return x
    expect(DfcTypeError, f, (np.ones(3, f32),), "# MARK", "item assignment", "dfc.where")


def test_unknown_tensor_attribute_is_an_error_and_an_attribute_error():
    def f(x):
        return x.nonzero()  # MARK
    msg = expect(AttributeError, f, (np.ones(3, f32),), "# MARK", "'nonzero'")
    assert "symbolic tensor" in msg
    with pytest.raises(dfc.DfcError):
        function(f)(np.ones(3, f32))


def test_truth_value_error_inside_dfc_function_gives_dfc_function_advice():
    def f(x, y):
        return sorted([x, y])  # MARK
    msg = expect(DfcTypeError, f, (f32(1.0), f32(2.0)), "# MARK", "dfc.where")
    assert "use dfc.function" not in msg


def test_python_error_while_tracing_names_the_user_line():
    def f(x):
        return x + undefined_name_for_this_test  # noqa: F821  # MARK
    with pytest.raises(NameError) as info:      # a DfcError that is still a NameError
        function(f)(f32(1.0))
    assert isinstance(info.value, dfc.DfcError)
    assert f"{__file__}:{line_of(f, '# MARK')}" in str(info.value)


def test_side_effects_in_a_tensor_while_test_run_once_per_evaluation(capsys):
    @dfc.function
    def f(n):
        i = 0
        while dfc.print("test", i) is None and i < n:
            i += 1
        return i

    assert int(f(np.int64(2))) == 2
    assert capsys.readouterr().out.split("\n")[:-1] == ["test 0", "test 1", "test 2"]   # as in Python


def test_a_weak_loop_variable_that_met_a_float32_is_float32_after_the_loop():
    @dfc.function
    def nested(x, n):
        s0 = 0
        i = 0
        while i < n:
            s1 = 0
            j = 0
            while j < n:
                s1 += x             # s1 settles to float32: a strong float32 after its loop
                j += 1
            s0 += s1                # weak int meets float32: float32, as in Python's s0 = 0 rules
            i += 1
        return s0, s1

    s0, s1 = nested(np.float32(1.5), np.int64(3))
    assert s0.dtype == np.float32 and s1.dtype == np.float32
    assert float(s0) == 13.5

    @dfc.function
    def count(n):
        s = 0
        i = 0
        while i < n:
            s += 1                  # stays weak: Python ints only
            i += 1
        return s * np.float32(0.5)  # a weak int meets float32: float32

    assert count(np.int64(4)).dtype == np.float32


# ------------------------------------------------------------------ loop-invariant values carried by a loop
def test_a_loop_variable_assigned_a_loop_invariant_value(all_modes):
    """A body that sets a variable from values that do not change in the loop (`y = x + x`, `y = x`,
    `y = max(x, x)`) runs as Python does: y is the invariant after at least one iteration, its first value
    after none; the gradient of y matches (2 for x + x after an iteration, 1 before)."""
    def f(x, n):
        i = 0
        y, z, w = x, x * 3.0, x - 1.0
        while i < n:
            y = x + x
            z = x
            w = np.maximum(x, 0.5) if isinstance(x, np.ndarray) else dfc.maximum(x, 0.5)
            i += 1
        return y, z, w
    same_as_python(f, (np.array([1.0, -2.0]), np.int64(0)), (np.array([1.0, -2.0]), np.int64(3)),
                   all_modes=all_modes)

    def g(x, n):
        i, y = dfc.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, x + x), (0, x))
        return y, dfc.gradients(dfc.reduce_sum(y), x)
    gg = dfc.trace(g, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
    for n, slope in ((0, 1.0), (1, 2.0), (4, 2.0)):
        y, dx = all_modes(gg, np.array([1.0, -2.0]), np.int64(n))
        np.testing.assert_array_equal(y, np.array([1.0, -2.0]) * slope)
        np.testing.assert_array_equal(dx, [slope, slope])
