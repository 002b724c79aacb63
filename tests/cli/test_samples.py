"""The bundled samples really work: as scripts and through `dfc compile` + `dfc run`."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT)


def sh(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, cwd=ROOT)


def test_quickstart_script_and_compiled_graph(tmp_path):
    r = sh("samples/quickstart.py")
    assert r.returncode == 0, r.stderr
    assert "collatz(27): 111 steps, peak 9232" in r.stdout
    r = sh("-m", "dfc.cli", "compile", "samples/quickstart.py", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "collatz:" in r.stdout and "1 loops" in r.stdout
    first = (tmp_path / "collatz.json").read_bytes()
    r = sh("-m", "dfc.cli", "compile", "samples/quickstart.py", "-o", str(tmp_path))
    assert (tmp_path / "collatz.json").read_bytes() == first           # byte-identical recompile
    r = sh("-m", "dfc.cli", "run", str(tmp_path / "collatz.json"), "--input", "n=27", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"outputs": [111, 9232]}
