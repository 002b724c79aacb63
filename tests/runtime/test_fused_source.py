"""`dfc show --fused` / Session.fused_frames: the Python the executor generates for each loop frame."""
import os
import subprocess
import sys

import numpy as np

import dfc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nested(x, n):
    def outer(i, s):
        inner = dfc.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + x), (np.int64(0), s))[1]
        return i + 1, inner
    return dfc.while_loop(lambda i, s: i < n, outer, (np.int64(0), x))[1]


def test_fused_frames_show_each_loop_and_run_the_same():
    g = dfc.trace(_nested, dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "int64"))
    frames = dfc.Session(g).fused_frames()
    assert len(frames) == 2                                   # the outer loop and the loop nested in it
    for name, source in frames.items():
        compile(source, name, "exec")                         # real Python, not a description
        assert source.startswith("def ") and "while True:" in source
    outer = max(frames.values(), key=len)
    assert "# loop frame" in outer                            # the inner loop is a call inside the outer one
    assert float(g(np.float64(1.0), np.int64(3))) == 1.0 + 0 + 1 + 2


def test_dfc_show_fused(tmp_path):
    g = dfc.trace(_nested, dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "int64"))
    dfc.save(g, str(tmp_path / "g.json"))
    r = subprocess.run([sys.executable, "-m", "dfc.cli", "show", "--fused", str(tmp_path / "g.json")],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("# ---- frame ") == 2 and "def run(ctx, kern, enters, tag):" in r.stdout
