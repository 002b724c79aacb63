"""The quickstart of the README really works: as a script and through `dfc compile` + `dfc run`."""
import json

from tests import clitools


def test_quickstart_script_and_compiled_graph(tmp_path):
    r = clitools.python("samples/quickstart.py")
    assert r.returncode == 0, r.stderr
    assert "collatz(27): 111 steps, peak 9232" in r.stdout
    r = clitools.dfc("compile", "samples/quickstart.py", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "collatz:" in r.stdout and "1 loops" in r.stdout
    first = (tmp_path / "collatz.json").read_bytes()
    r = clitools.dfc("compile", "samples/quickstart.py", "-o", str(tmp_path))
    assert (tmp_path / "collatz.json").read_bytes() == first           # byte-identical recompile
    r = clitools.dfc("run", str(tmp_path / "collatz.json"), "--input", "n=27", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"outputs": [111, 9232]}
