"""`dfc show` prints each node's user variable and source file:line; the JSON records them
deterministically."""
import inspect
import json
import os
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
