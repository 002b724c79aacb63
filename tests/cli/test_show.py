"""`dfc show` prints each node's user variable and source file:line; the JSON records them
deterministically."""
import inspect
import json
import os
import re
import textwrap

import dfc
from tests import clitools

HERE = os.path.basename(__file__)


@dfc.function(input_signature=[dfc.TensorSpec([None], "float32"), dfc.TensorSpec([], "int32")])
def decay(x, n):
    total = dfc.reduce_sum(x)           # TOTAL
    while n > 0:                        # LOOP
        total = total * 0.5             # HALF
        n -= 1
    return total


def line(marker):
    lines, first = inspect.getsourcelines(decay.python_function)
    return first + next(i for i, text in enumerate(lines) if f"# {marker}" in text)


def test_show_lines_name_the_users_file_line_and_variable(tmp_path):
    dfc.save(decay.trace(), str(tmp_path / "decay.json"))
    r = clitools.dfc("show", tmp_path / "decay.json")
    assert r.returncode == 0, r.stderr
    nodes = [l for l in r.stdout.splitlines() if l.startswith("%")]
    by_op = {}
    for l in nodes:
        by_op.setdefault(l.split(" = ")[1].split("(")[0], []).append(l)
    assert by_op["Sum"][0].endswith(f"# total @ {HERE}:{line('TOTAL')}"), by_op["Sum"]
    assert any(l.endswith(f"# total @ {HERE}:{line('HALF')}") for l in by_op["Mul"]), by_op["Mul"]
    assert all(f"{HERE}:{line('LOOP')}" in l for l in by_op["Merge"] + by_op["Switch"] + by_op["Exit"])
    assert {l.split("# ")[1].split(" @")[0] for l in by_op["Merge"]} == {"total", "n"}
    assert by_op["Placeholder"][0].endswith("# x")
    for l in nodes:                      # every node the user's code built says where
        if "Placeholder(" not in l:
            assert f"{HERE}:" in l, l


def test_the_json_is_the_same_for_the_same_program(tmp_path):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent("""
        import dfc

        @dfc.function(input_signature=[dfc.TensorSpec([], "float32")])
        def f(x):
            y = x * 2.0
            if y > 1.0:
                y = y - 1.0
            return y
    """))
    outs = []
    for k in range(2):
        r = clitools.dfc("compile", src, "-o", tmp_path / f"out{k}")
        assert r.returncode == 0, r.stderr
        outs.append((tmp_path / f"out{k}" / "f.json").read_text())
    assert outs[0] == outs[1]
    nodes = json.loads(outs[0])["nodes"]
    assert {n["var"] for n in nodes if "var" in n} >= {"x", "y"}
    assert dfc.load(str(tmp_path / "out0" / "f.json")).nodes["x"].var == "x"     # read back


def _looped(x, n):
    def body(i, s):
        inner = dfc.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + x), (0, s))[1]
        return i + 1, inner
    return dfc.while_loop(lambda i, s: i < n, body, (0, x))[1]


def _legend(section):
    """index -> name of the `# ---- legend` lines after one generated source of `dfc show --fused`."""
    out = {}
    for l in section.split("# ---- legend:")[1].splitlines()[1:]:
        if l.startswith("#   "):
            kind_k, name = l[4:].split(": ", 1)
            out[kind_k] = name
    return out


def test_show_fused_prints_a_legend_of_the_indices_the_generated_code_names(tmp_path):
    """Generated code names nodes and frames by index only (no graph text in source); the CLI prints which
    node and frame each index is, from the plan the code came from."""
    g = dfc.trace(_looped, dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "int64"))
    dfc.save(g, str(tmp_path / "g.json"))
    r = clitools.dfc("show", "--fused", tmp_path / "g.json")
    assert r.returncode == 0, r.stderr
    g = dfc.load(str(tmp_path / "g.json"))
    frames = {n.attrs["frame_name"] for n in g.nodes.values() if n.op == "Enter"}
    sections = r.stdout.split("# ---- frame ")[1:]
    sections[-1], run = sections[-1].split("# ---- the whole run")
    assert len(sections) == 2
    for section in sections + [run]:
        legend = _legend(section)
        code = section.split("# ---- legend:")[0]
        cited = {f"{kind} {k}" for kind, k in re.findall(r"# (node|loop frame) (\d+)\n", code)}
        assert cited and cited == set(legend), (cited, legend)
        for key, name in legend.items():
            assert (name in frames) if key.startswith("loop frame") else (name in g.nodes), (key, name)
        for k in re.findall(r"# node (\d+)\n *v\d+_0 = \(v\d+_\d+ < v\d+_\d+\)", code):
            assert g.nodes[legend[f"node {k}"]].op == "Less"      # the index names the node the code computes
    assert re.search(r"# node \d+\n *v\d+_0 = \(v\d+_\d+ < v\d+_\d+\)", run)         # (that check ran)


def test_the_legend_shows_any_name_on_one_escaped_line():
    from dfc import cli
    src = "    # node 0\n    # node 1\n    # loop frame 1\n    x = 1  # node 2 (not a comment line of its own)"
    names = {"nodes": ["plain/name_0", "evil\n# node 2: x\u2028'", "z"], "frames": ["", "f" * 300]}
    out = cli._legend(src, names)
    lines = out.splitlines()[1:]
    assert lines[1:] == ["#   loop frame 1: " + repr("f" * 200) + "...", "#   node 0: plain/name_0",
                         "#   node 1: " + ascii("evil\n# node 2: x\u2028'")]
    assert out.isascii() and len(lines) == 4 and all(l.startswith("# ") for l in lines)
    assert cli._legend("# not fused: a Recv", names) == ""


@dfc.function(input_signature=[dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64")])
def squash(x, n):
    i = 0
    while i < n:
        x = dfc.tanh(x) * 2.0
        i += 1
    return x


@dfc.function(input_signature=[dfc.TensorSpec([3], "float64")])
def chatty(x):
    i = 0
    while i < 3:
        dfc.print("i", i)
        x = x * 2.0
        i += 1
    return x


def test_show_fused_says_whether_the_default_mode_compiles_the_run_with_xla(tmp_path):
    import pytest
    pytest.importorskip("jax")
    said = {}
    for name, fn in (("squash", squash), ("chatty", chatty), ("decay", decay)):
        dfc.save(fn.trace(), str(tmp_path / f"{name}.json"))
        r = clitools.dfc("show", "--fused", tmp_path / f"{name}.json")
        assert r.returncode == 0, r.stderr
        said[name] = next(l for l in r.stdout.splitlines() if l.startswith("# ---- default mode:"))
    assert "the run compiles whole with XLA" in said["squash"]
    assert "does not compile with XLA" in said["chatty"] and "Print" in said["chatty"]
    assert "not known before a run" in said["decay"]        # its input's length is not fixed
