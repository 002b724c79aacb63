"""Checkpoint files are safe: atomic saves, checked restores, and loaded graphs confined to a directory."""
import os
import signal
import textwrap
import time

import numpy as np
import pytest

import dfc
from tests import clitools


def _saving_graph(path, tmp_path, name="saver"):
    w = dfc.Variable(np.arange(3.0), name="w")
    g = dfc.trace(lambda: dfc.Checkpoint({"w": w}).save(path) or w.read_value())
    file = str(tmp_path / f"{name}.json")
    dfc.save(g, file)
    return file


@pytest.mark.parametrize("bad", ["../escaped.npz", "/tmp/dfc_escaped_{pid}.npz", "a/../../escaped.npz"])
def test_dfc_run_refuses_a_save_outside_the_checkpoint_dir(tmp_path, bad):
    bad = bad.format(pid=os.getpid())
    work = tmp_path / "work"
    work.mkdir()
    graph = _saving_graph(bad, tmp_path)
    r = clitools.dfc("run", graph, "--checkpoint-dir", str(work), cwd=str(work))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "checkpoint path" in r.stderr and "save" in r.stderr      # names the path and the Save node
    assert not (tmp_path / "escaped.npz").exists()
    assert not os.path.exists(bad)
    with pytest.raises(dfc.DfcGraphError, match="must be relative"):
        dfc.Session(dfc.load(graph))                                  # refused before anything runs


def test_dfc_run_writes_under_the_checkpoint_dir(tmp_path):
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    graph = _saving_graph("sub/model.npz", tmp_path)
    (ckdir / "sub").mkdir()
    r = clitools.dfc("run", graph, "--checkpoint-dir", str(ckdir), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    with np.load(ckdir / "sub" / "model.npz") as z:
        np.testing.assert_array_equal(z["w"], [0, 1, 2])
    r = clitools.dfc("run", graph, cwd=str(ckdir))                           # default: the current directory
    assert r.returncode == 0, r.stderr


def test_a_symlink_cannot_lead_a_loaded_graph_out(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    os.symlink(outside, ckdir / "link")
    g = dfc.load(_saving_graph("link/model.npz", tmp_path))
    with pytest.raises(dfc.DfcGraphError, match="leaves the checkpoint directory"):
        dfc.Session(g, checkpoint_dir=str(ckdir))
    assert not (outside / "model.npz").exists()


def test_restore_refuses_another_dtype_or_shape(tmp_path):
    path = str(tmp_path / "m.npz")
    w64 = dfc.Variable(np.zeros(3), name="w")
    dfc.Checkpoint({"w": w64}).save(path)
    w32 = dfc.Variable(np.zeros(3, np.float32), name="w")
    with pytest.raises(dfc.DfcError, match=r"holds 'w' as float64\[3\], but the variable is float32\[3\]") as e:
        dfc.Checkpoint({"w": w32}).restore(path)                     # eager
    assert "test_checkpoint_files.py" in str(e.value)
    w2 = dfc.Variable(np.zeros(2), name="w")
    g = dfc.trace(lambda: dfc.Checkpoint({"w": w2}).restore(path)[0])
    with pytest.raises(dfc.DfcError, match=r"float64\[3\], but the variable is float64\[2\]") as e:
        g()                                                          # in the graph: names the Restore node
    assert e.value.node is not None
    np.testing.assert_array_equal(w2.numpy(), [0, 0])                # nothing assigned
    with pytest.raises(dfc.DfcError, match="has no variable 'b'"):
        dfc.Checkpoint({"b": dfc.Variable(1.0, name="b")}).restore(path)


def test_restore_of_a_corrupt_file_is_a_dfc_error(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(dfc.DfcError, match="cannot restore"):
        dfc.Checkpoint({"w": dfc.Variable(np.zeros(2), name="w")}).restore(str(path))


SAVER = textwrap.dedent("""
    import sys, numpy as np, dfc
    path = sys.argv[1]
    w = dfc.Variable(np.zeros(1 << 20), name="w")          # 8 MiB: a save takes a while
    ckpt = dfc.Checkpoint({"w": w})

    @dfc.function
    def step(k):
        w.assign(dfc.fill([1 << 20], k))
        ckpt.save(path)
        return k

    k = 0.0
    while True:
        k += 1.0
        step(np.float64(k))
        print(k, flush=True)
""")


def test_a_process_killed_while_saving_keeps_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "ckpt.npz")
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    rng = np.random.default_rng(0)
    for kill in range(4):
        p = clitools.start_python(script, path, stderr=None)
        try:
            assert p.stdout.readline().strip() == "1.0"            # one complete save exists
            time.sleep(float(rng.uniform(0.0, 0.3)))                # then kill it at a random moment
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        with np.load(path) as z:                                    # never torn: one whole save
            w = z["w"]
        assert w.shape == (1 << 20,)
        assert w[0] >= 1.0 and np.all(w == w[0]), f"kill {kill}: torn checkpoint"
    leftovers = [f for f in os.listdir(tmp_path) if f.startswith(".dfc-save-")]
    assert len(leftovers) <= 1          # each saver's first save removed the temporaries of the killed ones
