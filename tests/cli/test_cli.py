"""dfc run / show / viz: outputs, exit codes, one-line errors; `dfc run` never imports the compiler."""
import json

import numpy as np
import pytest

import dfc
from tests import clitools


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    def f(x, n):
        def body(i, s):
            return i + 1, dfc.cond(i % 2 == 0, lambda: s + x, lambda: s * 2.0)
        i, s = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([2])))
        return {"s": s, "steps": i}
    g = dfc.trace(f, dfc.TensorSpec([2], "float32"), dfc.TensorSpec([], "int64"))
    path = tmp_path_factory.mktemp("g") / "f.json"
    dfc.save(g, str(path))
    return str(path), g


def test_run_json_matches_python_call(graph_file):
    path, g = graph_file
    r = clitools.dfc("run", path, "--input", "x=[1, 2]", "--input", "n=5", "--json")
    assert r.returncode == 0, r.stderr
    want = g(np.array([1, 2], np.float32), 5)
    assert json.loads(r.stdout) == {"outputs": [want["s"].tolist(), int(want["steps"])]}


def test_run_npy_input_and_npz_output(graph_file, tmp_path):
    path, g = graph_file
    np.save(tmp_path / "x.npy", np.array([3, 4], np.float32))
    out = tmp_path / "out.npz"
    r = clitools.dfc("run", path, "-i", f"x=@{tmp_path / 'x.npy'}", "-i", "n=3", "--output", str(out))
    assert r.returncode == 0, r.stderr
    with np.load(out) as z:
        np.testing.assert_array_equal(z["output_0"], g(np.array([3, 4], np.float32), 3)["s"])


@pytest.mark.parametrize("args,msg", [
    (["-i", "x=[1, 2]"], "missing input"),
    (["-i", "x=[1, 2]", "-i", "n=1.5"], "'n'"),
    (["-i", "x=[1, 2, 3]", "-i", "n=1"], "dimension 0 must be 2"),
    (["-i", "x=[1, 2]", "-i", "n=1", "-i", "y=3"], "no input 'y'"),
    (["-i", "x=hello", "-i", "n=1"], "not a number"),
    (["-i", "x=@/no/such.npy", "-i", "n=1"], "cannot load"),
])
def test_bad_feeds_are_one_line_errors(graph_file, args, msg):
    r = clitools.dfc("run", graph_file[0], *args)
    assert r.returncode == 1
    assert msg in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_or_malformed_file_exit_1(tmp_path):
    r = clitools.dfc("run", str(tmp_path / "nope.json"))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = clitools.dfc("show", str(bad))
    assert r.returncode == 1 and "invalid JSON" in r.stderr


def test_bad_usage_exit_2(graph_file):
    assert clitools.dfc("run").returncode == 2
    assert clitools.dfc("frobnicate").returncode == 2
    assert clitools.dfc("run", graph_file[0], "--input", "novalue").returncode == 2


def test_show_one_line_per_node(graph_file):
    path, g = graph_file
    r = clitools.dfc("show", path)
    assert r.returncode == 0
    node_lines = [l for l in r.stdout.splitlines() if l.startswith("%")]
    assert len(node_lines) == g.num_nodes()
    assert any("= Merge(" in l and "[frame=while]" in l for l in node_lines)


def test_viz_dot_and_mermaid(graph_file, tmp_path):
    for ext in ("dot", "mmd"):
        out = tmp_path / f"g.{ext}"
        r = clitools.dfc("viz", graph_file[0], "-o", str(out))
        assert r.returncode == 0, r.stderr
        text = out.read_text()
        assert ('subgraph "cluster_while"' in text) if ext == "dot" else ('subgraph f0 ["while"]' in text)


def test_run_does_not_import_the_compiler(graph_file):
    code = ("import sys; sys.argv = ['dfc', 'run', %r, '-i', 'x=[1,2]', '-i', 'n=2', '--json']\n"
            "import dfc.cli\n"
            "try:\n    dfc.cli.main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "bad = [m for m in sys.modules if m.startswith('dfc.compiler') or m == 'gast']\n"
            "assert not bad, bad\nprint('isolated')\n") % graph_file[0]
    r = clitools.python("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("isolated")
