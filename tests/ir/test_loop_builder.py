"""LoopBuilder (dfc/ir/loops.py) and Graph.set_input: the Figure 4 skeleton built in one place."""
import ast
import pathlib

import numpy as np
import pytest

import dfc
from dfc.ir.dtypes import TType
from dfc.ir.graph import Graph, Node, parse_input
from dfc.ir.loops import LoopBuilder
from tests.conftest import run_all_modes


class _Plain:
    """A `make` callback over plain nodes, as a caller without symbolic tensors would write."""

    def __init__(self, g, frame):
        self.g, self.frame, self.roles, self.ttypes = g, frame, {}, {}

    def __call__(self, op, inputs, attrs, role, ttype):
        name = f"{self.frame}_{role}{sum(1 for r in self.roles.values() if r == role)}"
        self.g.add_node(Node(name, op, list(inputs), attrs))
        self.roles[name], self.ttypes[name] = role, ttype
        outputs = 2 if op in ("Switch", "Merge") else 1
        return [f"{name}:{p}" for p in range(outputs)]


def _sum_loop():
    """s = 0.0; i = 0; while i < n: s += x; i += 1   (x: float32, n: int64), built by hand."""
    g = Graph("sum_loop")
    for node in [Node("x", "Placeholder", [], {"dtype": "float32", "shape": []}),
                 Node("n", "Placeholder", [], {"dtype": "int64", "shape": []}),
                 Node("i0", "Const", [], {"value": np.zeros((), np.int64)}),
                 Node("s0", "Const", [], {"value": np.zeros((), np.float32)})]:
        g.add_node(node)
    make = _Plain(g, "loop")
    lb = LoopBuilder(g, make, "loop", 32, ref=str)
    i, s = lb.enter("i0:0", TType("int64", ())), lb.enter("s0:0")
    constant = {"frame_name": "loop", "is_constant": True, "parallel_iterations": 32}
    g.add_node(Node("n_in", "Enter", ["n:0"], constant))
    g.add_node(Node("x_in", "Enter", ["x:0"], constant))
    g.add_node(Node("less", "Less", [i, "n_in:0"]))
    i_body, s_body = lb.iterate(lb.loop_cond("less:0"))
    g.add_node(Node("one", "Const", ["^" + parse_input(i_body)[0]], {"value": np.ones((), np.int64)}))
    g.add_node(Node("i_next", "Add", [i_body, "one:0"]))
    g.add_node(Node("s_next", "Add", [s_body, "x_in:0"]))
    lb.close(["i_next:0", "s_next:0"])
    i_out, s_out = lb.exit_all()
    g.signature.update(inputs=[{"name": "x", "node": "x", "dtype": "float32", "shape": []},
                               {"name": "n", "node": "n", "dtype": "int64", "shape": []}],
                       outputs={"tuple": [{"ref": i_out}, {"ref": s_out}]})
    return g, lb, make


def test_hand_built_loop_verifies_and_runs_like_python():
    g, lb, make = _sum_loop()
    g.verify()
    for x, n in [(1.5, 4), (2.0, 0), (0.25, 9)]:
        i, s = run_all_modes(g, np.float32(x), np.int64(n))
        assert (int(i), float(s)) == (max(n, 0), x * max(n, 0))


def test_skeleton_is_figure_4():
    g, lb, make = _sum_loop()
    ops = {n.name: n.op for n in g.nodes.values()}
    assert [ops[parse_input(r)[0]] for r in lb.enters] == ["Enter", "Enter"]
    for m, e, nx, sw, ident, ex in zip(lb.merges, lb.enters, lb.next_iterations, lb.switches, lb.identities,
                                       lb.exits):
        merge = g.nodes[parse_input(m)[0]]
        assert merge.op == "Merge" and merge.inputs == [e, nx]          # the back edge was closed
        assert g.nodes[parse_input(sw[0])[0]].inputs == [m, "loop_loop_cond0:0"]
        assert g.nodes[parse_input(ident)[0]].inputs == [sw[1]]
        assert g.nodes[parse_input(ex)[0]].inputs == [sw[0]]
        assert g.nodes[parse_input(e)[0]].attrs == {"frame_name": "loop", "is_constant": False,
                                                    "parallel_iterations": 32}
    # roles name every node the builder made; a Merge's declared type reaches the callback
    assert sorted(set(make.roles.values())) == ["body", "enter", "exit", "loop_cond", "merge", "next", "switch"]
    assert make.ttypes[parse_input(lb.merges[0])[0]] == TType("int64", ())
    assert make.ttypes[parse_input(lb.merges[1])[0]] is None


def test_close_needs_one_value_per_variable():
    g, lb, _ = _sum_loop()
    with pytest.raises(ValueError, match="1 next values for 2 variables"):
        lb.close(["i_next:0"])


def test_set_input_rewires_and_forgets_cached_types():
    g = Graph("g")
    g.add_node(Node("a", "Const", [], {"value": np.zeros(3, np.float32)}))
    g.add_node(Node("b", "Const", [], {"value": np.zeros((2, 2), np.int64)}))
    g.add_node(Node("c", "Identity", ["a:0"]))
    assert g.infer_types()["c"][0] == TType("float32", (3,))
    g.set_input("c", 0, "b:0")
    assert g.nodes["c"].inputs == ["b:0"]
    assert g.infer_types()["c"][0] == TType("int64", (2, 2))
    g.add_control_input("c", "a")
    assert g.nodes["c"].inputs == ["b:0", "^a"]
    with pytest.raises(dfc.DfcGraphError):
        g.set_input("nope", 0, "a:0")


def test_compiled_loops_are_closed_by_the_loop_builder():
    """while_loop, its gradient loop and the forward counter: every loop Merge reads its Enter and
    its NextIteration, and the graph verifies."""
    def f(x, n):
        def body(i, s):
            return i + 1, s * x + 1.0
        _, s = dfc.while_loop(lambda i, s: i < n, body, (0, x))
        return s, dfc.gradients(s, x)

    g = dfc.trace(f, dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64"))
    g.verify()
    merges = [n for n in g.nodes.values() if n.op == "Merge" and
              g.nodes[parse_input(n.inputs[0])[0]].op == "Enter"]
    assert len(merges) >= 5          # forward i, s, the counter; gradient counter and s
    for m in merges:
        assert g.nodes[parse_input(m.inputs[1])[0]].op == "NextIteration", m
    s, ds = run_all_modes(g, np.float32(0.5), np.int64(3))
    assert float(s) == pytest.approx(((0.5 * 0.5 + 1) * 0.5 + 1) * 0.5 + 1)
    assert float(ds) == pytest.approx(4 * 0.5 ** 3 + 2 * 0.5 + 1)     # s = x^4 + x^2 + x + 1


def _writes_to_graph_state(path):
    """(line, text) of assignments to `X._types`, `X.inputs`, `X.inputs[...]`, and calls of
    X.inputs.append/insert/extend."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr in ("_types", "inputs"):
                found.append((node.lineno, ast.unparse(t)))
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == "inputs":
                found.append((node.lineno, ast.unparse(t)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("append", "insert", "extend") and \
                isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "inputs":
            found.append((node.lineno, ast.unparse(node.func)))
    return found


def test_only_the_graph_rewires_inputs():
    root = pathlib.Path(dfc.__file__).parent
    paths = sorted(root.glob("compiler/**/*.py")) + [root / "runtime" / "partition.py", root / "ir" / "loops.py"]
    bad = {str(p.relative_to(root.parent)): w for p in paths if (w := _writes_to_graph_state(p))}
    assert not bad, f"use Graph.set_input / add_control_input instead: {bad}"
