"""Loading a graph from someone else is safe (issue 9, section 3).

Every malformed file is a DfcGraphError (or DfcTypeError) naming the bad node, never a raw Python
exception; what a graph declares must match what it computes; loading allocates nothing that
attr values ask for; a Session takes a memory limit; verification is linear; a stuck fused loop
is reported as a DfcDeadlockError.
"""
import gc
import json
import re
import sys
import tracemalloc

import numpy as np
import pytest

import dfc
from dfc.ir import serialize
from dfc.ir.graph import Graph, Node, parse_input
from dfc.runtime.executor import KernelContext, Plan, Run

F32, I64 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64")
MODES = [dict(mode="reference"), dict(mode="threads", fuse_loops=False), dict(mode="threads", fuse_loops=True)]


def loop_graph():
    def f(x, n):
        def body(i, s):
            s = dfc.cond(i % 2 == 0, lambda: s + x, lambda: s * 1.5)
            return i + 1, s
        i, s = dfc.while_loop(lambda i, s: i < n, body, (0, x))
        j, t = dfc.while_loop(lambda j, t: j < 3, lambda j, t: (j + 1, t + s), (0, x))
        return {"t": t, "i": i}
    return dfc.trace(f, F32, I64)


def doc():
    return json.loads(serialize.to_json(loop_graph()))


def node(d, name_or_op):
    return next(n for n in d["nodes"] if name_or_op in (n["name"], n["op"]))


def add_node(d, name, op, inputs=(), **attrs):
    d["nodes"].append({"name": name, "op": op, "inputs": list(inputs), "attrs": attrs})


def const(d, name, value):
    add_node(d, name, "Const", value=serialize.encode_tensor(np.asarray(value)))


def output(d, ref):
    d["signature"]["outputs"] = {"ref": ref}


def rejected(d_or_text, node_name=None, match=None, error=dfc.DfcError):
    text = d_or_text if isinstance(d_or_text, str) else json.dumps(d_or_text)
    with pytest.raises(error, match=match) as e:
        dfc.loads(text)
    if node_name is not None:
        assert e.value.node == node_name, str(e.value)
    return e.value


# ------------------------------------------------------------------ 1. every exception is a DfcError


def test_deeply_nested_json_is_a_graph_error():
    text = '{"format": "dfc-graph", "version": 1, "signature": ' + "[" * 100000 + "]" * 100000 + ', "nodes": []}'
    rejected(text, match="nested too deeply", error=dfc.DfcGraphError)
    d = doc()
    d["signature"]["outputs"] = "X"
    text = json.dumps(d).replace('"X"', '{"tuple": [' * 400 + '{"ref": "while_exit:0"}' + "]}" * 400)
    rejected(text, match="nested more than", error=dfc.DfcGraphError)
    d = doc()
    d["signature"]["outputs"] = "X"
    text = json.dumps(d).replace('"X"', '{"tuple": [' * 120 + '{"ref": "while_exit:0"}' + "]}" * 120)
    rejected(text, match="nested more than 100", error=dfc.DfcGraphError)


@pytest.mark.parametrize("where", ["const", "placeholder"])
def test_infinite_shape_is_a_graph_error_naming_the_node(where):
    d = doc()
    n = node(d, "Const") if where == "const" else node(d, "x")
    shape = n["attrs"]["value"] if where == "const" else n["attrs"]
    shape["shape"] = ["INF"]
    rejected(json.dumps(d).replace('"INF"', "Infinity"), node_name=n["name"], error=dfc.DfcGraphError)


@pytest.mark.parametrize("mutate, name", [
    (lambda d: node(d, "while_enter")["attrs"].update(parallel_iterations=10 ** 30), "while_enter"),
    (lambda d: node(d, "x")["attrs"].update(shape=[10 ** 30]), "x"),
    (lambda d: node(d, "Const")["attrs"]["value"].update(shape=[10 ** 30]), "const"),
    (lambda d: node(d, "Add")["inputs"].__setitem__(0, "x:" + "9" * 30), "add"),
    (lambda d: node(d, "Add")["inputs"].__setitem__(0, "x:" + "9" * 5000), "add"),
    (lambda d: add_node(d, "u", "Unstack", ["x"], num=10 ** 9), "u"),
    (lambda d: add_node(d, "u", "Unstack", ["x"], num=-1), "u"),
    (lambda d: add_node(d, "u", "OneHot", ["n"], depth=-3), "u"),
    (lambda d: add_node(d, "u", "Stack", ["x"], axis=2 ** 62), "u"),
    (lambda d: node(d, "while_enter")["attrs"].update(parallel_iterations=-5), "while_enter"),
    (lambda d: node(d, "x")["attrs"].update(shape=[-3]), "x"),
    (lambda d: node(d, "Const")["attrs"]["value"].update(shape=[-1]), "const"),
])
def test_huge_and_negative_numbers_are_graph_errors(mutate, name):
    d = doc()
    mutate(d)
    rejected(d, node_name=name)


def test_json_integer_too_long_for_python():
    text = json.dumps(doc()).replace('"parallel_iterations": 32', '"parallel_iterations": ' + "9" * 5000, 1)
    rejected(text, match="invalid JSON", error=dfc.DfcGraphError)


@pytest.mark.parametrize("ref", ["while_exit:1", "while_exit:9", "while_exit:-1", "nope:0", "while_exit:x",
                                 "^while_exit"])
def test_bad_output_port_is_rejected_at_load(ref):
    d = doc()
    output(d, ref)
    rejected(d, error=dfc.DfcGraphError, match="signature output")


@pytest.mark.parametrize("ref", ["const:1", "const:-1", "const:01x"])
def test_bad_input_port_names_the_node(ref):
    d = doc()
    node(d, "Add")["inputs"][0] = ref
    rejected(d, node_name="add", error=dfc.DfcGraphError)


@pytest.mark.parametrize("spec", [5, [5], [[]], [["bogus"]], [["int"]], [["int", 1, 2]], [["int", {"t": 0}]],
                                  [["int", {"t": "a"}]], [["slice", "a", None, None]], [["slice", 0, 1]],
                                  [["slice", None, None, 0]], [["tensor", 3]], [["ellipsis"], ["ellipsis"]],
                                  [["int", 10 ** 30]]])
def test_malformed_getitem_spec_names_the_node(spec):
    d = doc()
    add_node(d, "gi", "GetItem", ["x"], spec=spec)
    output(d, "gi:0")
    rejected(d, node_name="gi", error=dfc.DfcGraphError, match="index spec|json")


def _sig_bad_dtype(d):
    d["signature"]["inputs"][0]["dtype"] = "int32"


def _sig_bogus_dtype(d):
    d["signature"]["inputs"][0]["dtype"] = "bogus"


def _sig_bad_shape(d):
    d["signature"]["inputs"][0]["shape"] = [4]


def _sig_not_placeholder(d):
    d["signature"]["inputs"][0]["node"] = "const"


def _sig_duplicate(d):
    d["signature"]["inputs"].append(dict(d["signature"]["inputs"][0]))


def _sig_no_name(d):
    del d["signature"]["inputs"][0]["name"]


def _sig_inputs_not_list(d):
    d["signature"]["inputs"] = 5


def _sig_bad_target(d):
    d["signature"]["targets"] = [5]


def _sig_missing_target(d):
    d["signature"]["targets"] = ["nope"]


def _sig_output_in_loop(d):
    output(d, "while_merge:0")


def _sig_output_dict_keys(d):
    d["signature"]["outputs"] = {"dict": [[["k"], {"ref": "while_exit:0"}]]}


def _sig_output_handle(d):
    const(d, "init", 1.0)
    add_node(d, "h", "VarHandle", ["init"], shared_name="v_load_safety")
    output(d, "h:0")


@pytest.mark.parametrize("mutate", [_sig_bad_dtype, _sig_bogus_dtype, _sig_bad_shape, _sig_not_placeholder,
                                    _sig_duplicate, _sig_no_name, _sig_inputs_not_list, _sig_bad_target,
                                    _sig_missing_target, _sig_output_in_loop, _sig_output_dict_keys,
                                    _sig_output_handle], ids=lambda f: f.__name__)
def test_signature_is_validated_at_load_not_at_run_time(mutate):
    d = doc()
    mutate(d)
    rejected(d, error=dfc.DfcGraphError, match="signature|output")


def test_dfc_show_of_a_malformed_graph_is_an_error_not_a_traceback(tmp_path):
    from click.testing import CliRunner
    from dfc.cli import main
    d = doc()
    node(d, "Const")["attrs"]["value"]["shape"] = ["INF"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(d).replace('"INF"', "Infinity"))
    r = CliRunner().invoke(main, ["show", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output and isinstance(r.exception, SystemExit)


# ------------------------------------------------------------------ 2. declared types match inference


def _variable(d, init, read_dtype, read_shape=None):
    const(d, "init", init)
    add_node(d, "h", "VarHandle", ["init"], shared_name="v_load_safety_types", container="load_safety")
    add_node(d, "r", "ReadVariable", ["h"], dtype=read_dtype, shape=read_shape)
    output(d, "r:0")


def test_read_variable_declaring_int64_of_a_float64_variable_is_rejected():
    d = doc()
    _variable(d, np.float64(1.5), "int64", [])
    rejected(d, node_name="r", error=dfc.DfcTypeError, match="holds float64")
    d = doc()
    _variable(d, np.zeros(3), "float64", [4])
    rejected(d, node_name="r", error=dfc.DfcTypeError)
    d = doc()
    _variable(d, np.zeros(3), "float64", [3])
    assert dfc.loads(json.dumps(d))(np.float32(1), np.int64(2)).shape == (3,)


def test_read_variable_of_dtype_resource_is_rejected():
    d = doc()
    _variable(d, np.float64(1.5), "resource")
    rejected(d, node_name="r", error=dfc.DfcGraphError, match="resource")


@pytest.mark.parametrize("bad", ["add_as_handle", "read_float", "stack_pop", "ta_read"])
def test_handles_and_their_element_types_are_checked(bad):
    d = doc()
    if bad == "add_as_handle":
        const(d, "init", 1.0)
        add_node(d, "h", "VarHandle", ["init"], shared_name="v")
        add_node(d, "s", "Add", ["h", "h"])
        name = "s"
    elif bad == "read_float":
        add_node(d, "r", "ReadVariable", ["x"], dtype="float32")
        name = "r"
    elif bad == "stack_pop":
        add_node(d, "st", "StackV2", [], elem_dtype="float32")
        add_node(d, "push", "StackPush", ["st", "x"])
        add_node(d, "pop", "StackPop", ["st", "^push"], elem_dtype="int64")
        name = "pop"
    else:
        const(d, "size", np.int64(2))
        add_node(d, "ta", "TensorArray", ["size"], dtype="float32")
        const(d, "i", np.int64(0))
        add_node(d, "w", "TensorArrayWrite", ["ta:0", "i", "x", "ta:1"])
        add_node(d, "rd", "TensorArrayRead", ["ta:0", "i", "w"], dtype="float64")
        name = "rd"
    rejected(d, node_name=name, error=dfc.DfcTypeError)


@pytest.mark.parametrize("enter, is_constant", [("while_enter", True), ("while_enter_3", False)])
def test_enter_whose_is_constant_contradicts_its_use_is_rejected(enter, is_constant):
    g = loop_graph()
    d = doc()
    assert node(d, enter)["attrs"]["is_constant"] != is_constant
    node(d, enter)["attrs"]["is_constant"] = is_constant
    rejected(d, node_name=enter, error=dfc.DfcGraphError, match="is_constant")
    assert g(np.float32(1), np.int64(3))["i"] == 3


def test_next_iteration_from_one_branch_of_a_cond_is_rejected():
    # Today the reference executor says the result is dead while fused loops fail with a TypeError on
    # DEAD: the next value of `s` exists only on even iterations. Such a loop cannot make progress.
    d = doc()
    nxt = next(n for n in d["nodes"] if n["op"] == "NextIteration" and n["inputs"] == ["cond_merge:0"])
    nxt["inputs"] = ["add:0"]
    rejected(d, node_name=nxt["name"], error=dfc.DfcGraphError, match="may be dead")
    d = doc()
    nxt = next(n for n in d["nodes"] if n["op"] == "NextIteration" and n["inputs"] == ["cond_merge:0"])
    nxt["inputs"] = ["while_merge_1:0"]      # live even in the iteration that leaves the loop
    rejected(d, node_name=nxt["name"], error=dfc.DfcGraphError, match="live even when the loop stops")


def test_a_declared_type_the_graph_does_not_compute_is_an_error_at_run_time():
    # A TensorArray of unknown element shape read as [2] but written with [3] (known only when it runs):
    # no mode may return a value of another shape than the graph declares.
    def f(v):
        ta = dfc.TensorArray("float32", size=1, dynamic_size=False)
        return ta.write(0, v).read(0)
    d = json.loads(serialize.to_json(dfc.trace(f, dfc.TensorSpec([None], "float32"))))
    node(d, "TensorArrayRead")["attrs"]["element_shape"] = [2]
    g = dfc.loads(json.dumps(d))
    for kw in MODES:
        assert dfc.Session(g, **kw).call(np.ones(2, np.float32)).shape == (2,)
        with pytest.raises(dfc.DfcRuntimeError, match="declares float32\\[2\\]"):
            dfc.Session(g, **kw).call(np.ones(3, np.float32))


# ------------------------------------------------------------------ 3. no allocation at load; a memory limit


def _huge_range_graph():
    d = doc()
    for name, v in (("r0", 0), ("r1", 10 ** 15), ("r2", 1)):
        const(d, name, np.int64(v))
    add_node(d, "rng", "Range", ["r0", "r1", "r2"])
    add_node(d, "tot", "Sum", ["rng"])
    output(d, "tot:0")
    return json.dumps(d)


def test_loading_allocates_nothing_that_attr_values_ask_for():
    text = _huge_range_graph()
    tracemalloc.start()
    g = dfc.loads(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * len(text)
    assert g.infer_types()["rng"][0].shape == (10 ** 15,)
    for kw in MODES:
        with pytest.raises(dfc.DfcOutOfMemory) as e:
            dfc.Session(g, memory_limit="100MB", **kw).call(np.float32(1), np.int64(2))
        assert e.value.node == "rng"


def test_range_length_matches_numpy_without_making_the_array():
    from dfc.ir.ops import range_length
    for args in [(0, 10, 3), (10, 0, -3), (0, 1, 0.1), (0.5, 2.25, 0.25), (5, 5, 1), (5, 0, 1), (-3, 7, 2)]:
        vals = [np.float64(a) if isinstance(a, float) else np.int64(a) for a in args]
        if any(isinstance(a, float) for a in args):
            vals = [np.float64(a) for a in args]
        assert range_length(*vals) == len(np.arange(*vals)), args
    with pytest.raises(dfc.DfcTypeError, match="zero"):
        range_length(np.int64(0), np.int64(5), np.int64(0))


@pytest.mark.parametrize("value, expected", [(1000, 1000), ("2GB", 2 * 10 ** 9), ("512MiB", 512 << 20),
                                             ("1.5kb", 1500), (" 3 KiB ", 3072)])
def test_memory_limit_takes_bytes_or_a_size_string(value, expected):
    from dfc.runtime.limits import parse_bytes
    assert parse_bytes(value) == expected


@pytest.mark.parametrize("value", ["lots", "2XB", "-5", 0, True, "0GB", None])
def test_a_bad_memory_limit_is_a_dfc_error(value):
    g = dfc.trace(lambda x: x + 1, F32)
    if value is None:
        dfc.Session(g, memory_limit=value)      # no limit
        return
    with pytest.raises(dfc.DfcError, match="memory_limit"):
        dfc.Session(g, memory_limit=value)


def _growing_loop():
    def f(n):
        ta = dfc.TensorArray("float64")
        body = lambda i, ta: (i + 1, ta.write(i, dfc.zeros([1000], "float64")))   # noqa: E731
        return dfc.while_loop(lambda i, ta: i < n, body, (0, ta))[1].stack()
    return dfc.trace(f, dfc.TensorSpec([], "int64"))


@pytest.mark.parametrize("kw", MODES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_memory_limit_stops_a_loop_that_keeps_growing(kw):
    g = _growing_loop()
    s = dfc.Session(g, memory_limit="4MB", **kw)
    assert s.call(np.int64(10)).shape == (10, 1000)
    err = _raised(dfc.DfcOutOfMemory, s.call, np.int64(10 ** 6))
    assert "memory limit of 4000000 bytes" in str(err) and err.node
    assert s.call(np.int64(10)).shape == (10, 1000)     # the limit counts what is held now, not before


def _raised(error, fn, *args):
    """The error fn(*args) raises, without its traceback (which would keep the failed run's arrays alive)."""
    try:
        fn(*args)
    except error as e:
        e.__traceback__ = None
        gc.collect()
        return e
    raise AssertionError(f"{error.__name__} not raised")


def test_memory_limit_counts_small_values_saved_on_stacks():
    def f(n):
        ta = dfc.TensorArray("float64")
        return dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, dfc.cast(i, "float64"))),
                              (0, ta))[1].size()
    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    for kw in MODES:
        with pytest.raises(dfc.DfcOutOfMemory) as e:
            dfc.Session(g, memory_limit="1MB", **kw).call(np.int64(10 ** 7))
        m = re.search(r"\((\d+) bytes in use: (\d+) in arrays, (\d+) in stack and TensorArray entries\)", str(e.value))
        assert m, str(e.value)      # the message says what holds the memory
        assert int(m.group(1)) == int(m.group(2)) + int(m.group(3)) > 1_000_000 and int(m.group(3)) > 900_000


def test_numpy_array_too_big_in_a_kernel_is_out_of_memory():
    def f(n):
        return dfc.reduce_sum(dfc.fill(dfc.stack([n, n, n]), np.float64(1.0)))
    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    for kw in MODES:
        with pytest.raises(dfc.DfcOutOfMemory) as e:
            dfc.Session(g, **kw).call(np.int64(2 ** 40))      # no limit: numpy refuses ("array is too big")
        assert e.value.node == "fill"


# ------------------------------------------------------------------ 4. Graph.verify is linear


def _loops_graph(k):
    """k while loops in a chain, built node by node (tracing thousands of loops would be slow)."""
    g = Graph("loops")
    g.add_node(Node("x", "Placeholder", [], {"dtype": "float32", "shape": []}))
    g.add_node(Node("three", "Const", [], {"value": np.int64(3) + np.zeros((), np.int64)}))
    g.add_node(Node("zero", "Const", [], {"value": np.zeros((), np.int64)}))
    prev = "x"
    for k_ in range(k):
        p, fr = f"l{k_}_", f"loop{k_}"
        enter = {"frame_name": fr, "is_constant": False, "parallel_iterations": 32}
        for n in [Node(p + "ei", "Enter", ["zero"], enter), Node(p + "es", "Enter", [prev], enter),
                  Node(p + "en", "Enter", ["three"], dict(enter, is_constant=True)),
                  Node(p + "mi", "Merge", [p + "ei", p + "ni"]), Node(p + "ms", "Merge", [p + "es", p + "ns"]),
                  Node(p + "lt", "Less", [p + "mi", p + "en"]), Node(p + "lc", "LoopCond", [p + "lt"]),
                  Node(p + "si", "Switch", [p + "mi", p + "lc"]), Node(p + "ss", "Switch", [p + "ms", p + "lc"]),
                  Node(p + "bi", "Identity", [p + "si:1"]),
                  Node(p + "one", "Const", ["^" + p + "bi"], {"value": np.ones((), np.int64)}),
                  Node(p + "ai", "Add", [p + "bi", p + "one"]), Node(p + "as", "Add", [p + "ss:1", p + "ss:1"]),
                  Node(p + "ni", "NextIteration", [p + "ai"]), Node(p + "ns", "NextIteration", [p + "as"]),
                  Node(p + "xs", "Exit", [p + "ss"])]:
            g.add_node(n)
        prev = p + "xs"
    g.signature.update(inputs=[{"name": "x", "node": "x", "dtype": "float32", "shape": []}],
                       outputs={"ref": prev + ":0"})
    return g


def _calls_to_verify(g):
    """Python function calls made while verifying g: a deterministic measure of the work."""
    count = [0]

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1
    sys.setprofile(prof)
    try:
        g.verify()
    finally:
        sys.setprofile(None)
    return count[0]


def test_verify_is_linear_in_the_number_of_loops():
    assert float(_loops_graph(2)(np.float32(1))) == 64.0      # each loop doubles x three times
    small, big = _loops_graph(250), _loops_graph(1000)
    ratio = _calls_to_verify(big) / _calls_to_verify(small)
    assert ratio < 5, ratio          # quadratic work (consumers() per NextIteration) gave ~16


def test_a_file_with_a_thousand_loops_loads():
    g = dfc.loads(serialize.to_json(_loops_graph(1000)))
    assert len(g.nodes) == 3 + 16 * 1000
    assert float(dfc.Session(g, mode="threads").call(np.float32(0))) == 0.0


# ------------------------------------------------------------------ 5. deadlock report in fused mode


def test_a_stuck_fused_loop_is_reported_as_a_deadlock_not_an_attribute_error():
    # The inner loop (fused) takes the outer loop's x through an Enter that reaches only the outer loop's
    # first iteration, so in iteration 1 the fused loop waits for an Enter value that never comes. Loading
    # rejects such a graph; a Plan built directly (bypassing verification) must still report the deadlock.
    def f(x, n):
        def outer(i, s):
            return i + 1, dfc.while_loop(lambda j, t: j < 2, lambda j, t: (j + 1, t + s), (0, x))[1]
        return dfc.while_loop(lambda i, s: i < n, outer, (0, x))[1]
    g = dfc.trace(f, F32, I64)
    enters = [n for n in g.nodes.values() if n.op == "Enter"]
    captured = next(n for n in enters if n.attrs["is_constant"] and parse_input(n.inputs[0])[0] == "x" and
                    any(parse_input(m.inputs[0])[0] == n.name for m in enters))
    captured.attrs["is_constant"] = False
    g._types = None
    with pytest.raises(dfc.DfcGraphError, match="is_constant") as e:
        dfc.Session(g, mode="threads", fuse_loops=True)
    assert e.value.node == captured.name
    g.add_node(Node("outer_unfusable", "Identity", [next(n for n in g.nodes if n.startswith("while_switch")) + ":0"]))
    exit_ = g.signature["outputs"]["ref"]
    plan = Plan(g, [exit_], {"x", "n"}, ["outer_unfusable"], fuse=True)
    assert plan.programs and 1 not in plan.programs     # the inner loop is fused, the outer one is not
    with pytest.raises(dfc.DfcDeadlockError, match=r"fused; waiting for \d Enter value") as e:
        Run(plan, {"x": np.float32(1), "n": np.int64(3)}, KernelContext()).execute()
    assert e.value.node == exit_.split(":")[0]


def test_a_loaded_graph_gives_the_traced_graph_results_in_every_mode():
    g, h = loop_graph(), dfc.loads(serialize.to_json(loop_graph()))
    want = g(np.float32(1.5), np.int64(5))
    for kw in MODES:
        got = dfc.Session(h, **kw).call(np.float32(1.5), np.int64(5))
        assert list(got) == ["t", "i"]
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
            assert got[k].dtype == want[k].dtype


# ------------------------------------------------------------------ what the fuzzer (test_fuzz_load.py) found


def _set_const(d, name, value):
    node(d, name)["attrs"]["value"] = serialize.encode_tensor(np.asarray(value))


@pytest.mark.parametrize("case", ["next_iteration_into_another_frame", "loop_fed_by_its_own_result",
                                  "exit_not_from_the_loop_switch", "two_loop_conds", "non_scalar_loop_predicate"])
def test_malformed_loops_are_rejected_at_load(case):
    d = doc()
    if case == "next_iteration_into_another_frame":
        node(d, "while_1_next_1")["inputs"] = ["add:0"]      # an iteration of `while` feeding loop `while_1`
        name, match = "while_1_next_1", "feeds the Merge"
    elif case == "loop_fed_by_its_own_result":
        node(d, "while_enter_1")["inputs"] = ["while_1_exit_1:0"]   # while_1 itself waits for while's result
        name, match = None, "computed from its own result"
    elif case == "exit_not_from_the_loop_switch":
        node(d, "while_exit_1")["inputs"] = ["while_enter_3:0"]     # would leave the loop in every iteration
        name, match = "while_exit_1", "loop Switch's false output"
    elif case == "two_loop_conds":
        add_node(d, "lc2", "LoopCond", ["less"])
        name, match = "while_enter", "2 LoopCond"
    else:
        _set_const(d, "const_6", np.array([3, 3]))
        name, match = "while_1_loop_cond", "scalar"
    e = rejected(d, node_name=name, match=match)
    assert isinstance(e, (dfc.DfcGraphError, dfc.DfcTypeError))


def test_a_predicate_that_is_not_one_bool_at_run_time_is_an_error_in_every_mode():
    # i + [] has static shape [0]; the loop variable's shape is then unknown, and so is the predicate's.
    d = doc()
    _set_const(d, "const_4", np.zeros(0, np.int64))
    g = dfc.loads(json.dumps(d))
    for kw in MODES:
        with pytest.raises(dfc.DfcRuntimeError, match="truth value|scalar bool"):
            dfc.Session(g, **kw).call(np.float32(1), np.int64(3))


def test_a_loop_merge_value_index_gives_the_same_result_fused():
    # j += value_index of its loop Merge (0 in the first iteration, 1 after): the fused loop used to fail
    # with a NameError (it keeps only the Merge's value); now such a frame is not fused.
    d = doc()
    add_node(d, "vi", "Cast", ["while_1_merge:1", "^while_1_body"], dtype="int64")
    node(d, "add_2")["inputs"] = ["while_1_body:0", "vi:0"]
    g = dfc.loads(json.dumps(d))
    results = [dfc.Session(g, **kw).call(np.float32(1), np.int64(3)) for kw in MODES]
    want = loop_graph()(np.float32(1), np.int64(3))
    s = float(want["t"] - 1) / 3          # the loop adds s three times; now four
    for r in results:
        assert float(r["t"]) == pytest.approx(1 + 4 * s) and int(r["i"]) == 3


def _endless_partitioned_loop(body_device):
    def f(x, n):
        with dfc.device("cpu:2"):
            y = x * 2.0
        with dfc.device(body_device):
            v = dfc.fill([50_000], x)

        def body(i, s):
            with dfc.device(body_device):
                # the tanh of 50 000 elements keeps the body's device well behind the counter's (the
                # cheap scalar ops alone take about as long on both, so which ran ahead was chance)
                s = dfc.tanh(s) + x + 0.0 * dfc.reduce_mean(dfc.tanh(v))
            return i + 0, s           # i never grows: the loop never ends
        return dfc.while_loop(lambda i, s: i < n, body, (0, y))[1]
    return dfc.trace(f, F32, I64)


@pytest.mark.host_devices("the loop counter's cpu:0 partition runs ahead of the body's cpu:1 one; on a slower "
                         "device it does not, and the endless loop holds bounded memory")
def test_a_partitioned_loop_that_never_ends_hits_the_memory_limit():
    # The loop counter's device runs ahead of the body's and sends it a predicate per iteration: the
    # values waiting in the rendezvous grew without bound (6 MB/s here) and the limit did not see them.
    # Which kernel trips the limit is chance (a Send, or an Add on the other device that finds it full);
    # the message says what holds the memory either way.
    g = _endless_partitioned_loop("cpu:1")
    with pytest.raises(dfc.DfcOutOfMemory) as e:
        dfc.Session(g, mode="threads", memory_limit="8MB").call(np.float32(0.5), np.int64(3))
    m = re.search(r"memory limit of 8000000 bytes \((\d+) bytes in use: (\d+) in arrays, (\d+) in values sent "
                  r"ahead of their Recv\)", str(e.value))
    assert m, str(e.value)
    total, arrays, sent = map(int, m.groups())
    # most of it is sent values; the arrays' share grows with how many body iterations run at once,
    # which a loaded machine raises (3.8 MB arrays beside 7.6 MB sent was seen in CI with Recvs scheduled
    # as late as their consumers allow)
    assert total == arrays + sent > 8_000_000 and sent > 6_000_000 and sent > arrays


@pytest.mark.parametrize("body_device", ["cpu:1", "cpu:0"])
def test_interrupting_a_partitioned_run_stops_its_partitions(body_device):
    # With the body on cpu:0 the whole loop is fused on one device; on cpu:1 it crosses devices. Either way
    # an exception in the caller's thread (Ctrl-C) used to leave the partition threads looping forever.
    import ctypes
    import threading
    import time

    class Stop(BaseException):
        pass
    g = _endless_partitioned_loop(body_device)
    box = []

    def call():
        try:
            dfc.Session(g, mode="threads").call(np.float32(0.5), np.int64(3))
        except BaseException as e:   # noqa: BLE001
            box.append(e)
    t = threading.Thread(target=call, daemon=True)
    t.start()
    time.sleep(0.5)
    assert t.is_alive() and any(x.name.startswith("dfc-cpu") for x in threading.enumerate())
    for _ in range(50):
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(Stop))
        t.join(0.2)
        if not t.is_alive():
            break
    assert not t.is_alive() and isinstance(box[0], Stop)
    deadline = time.time() + 10
    while any(x.name.startswith("dfc-cpu") for x in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(x.name.startswith("dfc-cpu") for x in threading.enumerate())


def test_a_shape_whose_element_count_overflows_int64_is_refused_before_any_array_module_sees_it():
    """cupy counts elements in int64: 2**120 wraps to 0 and cupy.full returned an empty array (seen on an
    H200), so a sum of it was silently 0. The kernel refuses the shape itself, on every device."""
    from dfc.ir.graph import Node
    from dfc.runtime.kernels import array_kernels
    from dfc.runtime.kernels.registry import KERNELS

    class NoArrays:
        def full(self, *a, **k):
            raise AssertionError("the array module was asked for the array")

    fill = KERNELS["Fill"](Node("fill", "Fill", ["s", "v"], {}), NoArrays())
    with pytest.raises(ValueError, match="too big"):
        fill(None, [np.array([2 ** 40] * 3, np.int64), np.float64(1.0)])
    assert array_kernels._as_shape(np.array([2, 3], np.int64)) == (2, 3)
