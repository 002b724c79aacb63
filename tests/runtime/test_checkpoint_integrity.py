"""A restore is whole or nothing and reads one save; crafted files are refused within the memory the
variables need; special files never hang a run; killed saves leave no temporaries behind for good."""
import io
import os
import random
import subprocess
import textwrap
import tracemalloc
import zipfile

import numpy as np
import pytest

import dfc
from tests import clitools
from tests.conftest import PATHS


def _npy(arr):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _npy_header(dtype, shape):
    """The .npy header alone (what a file claiming `shape` starts with)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def _zip(path, members, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _pair(tag):
    return {"w": np.full(2, tag), "b": np.full(3, tag)}


def _w_and_b():
    return dfc.Variable(np.zeros(2), name="w"), dfc.Variable(np.zeros(3), name="b")


# ---------------------------------------------------------------- special files never hang a run
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_dfc_run_refuses_a_fifo_instead_of_waiting_on_it(tmp_path):
    os.mkfifo(tmp_path / "model.npz")
    w = dfc.Variable(np.zeros(2), name="w_fifo")
    graph = str(tmp_path / "restore.json")
    dfc.save(dfc.trace(lambda: dfc.Checkpoint({"w": w}).restore("model.npz")[0]), graph)
    try:            # the timeout only guards the suite against the hang this test is about
        r = clitools.dfc("run", graph, "--checkpoint-dir", tmp_path, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("dfc run waited on the named pipe")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "not a regular file" in r.stderr and "model.npz" in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_restore_refuses_a_file_that_is_not_regular(tmp_path, kind):
    path = tmp_path / "model.npz"
    held = None
    if kind == "directory":
        path.mkdir()
    else:
        if not hasattr(os, "mkfifo"):
            pytest.skip("needs named pipes")
        os.mkfifo(path)
        held = os.open(path, os.O_RDWR)          # a writer with bytes waiting: a reader that opens it reads
        os.write(held, b"PK\x03\x04" * 16)       # them instead of being refused
    try:
        w, b = _w_and_b()
        with pytest.raises(dfc.DfcError, match="not a regular file") as e:
            dfc.Checkpoint({"w": w, "b": b}).restore(str(path))
        assert "model.npz" in str(e.value) and "test_checkpoint_integrity.py" in str(e.value)
        g = dfc.trace(lambda: dfc.Checkpoint({"w": w, "b": b}).restore(str(path)))
        with pytest.raises(dfc.DfcRuntimeError, match="not a regular file") as e:
            g()
        assert e.value.node is not None
    finally:
        if held is not None:
            os.close(held)


# ---------------------------------------------------------------- all or nothing, in a graph too
def _b_spoiled(path, how):
    """A checkpoint whose `w` is good and whose `b` is `how` (missing, mistyped, misshapen, corrupt)."""
    w = np.full(2, 7.0)
    if how == "missing":
        return _zip(path, {"w.npy": _npy(w)})
    if how == "mistyped":
        return _zip(path, {"w.npy": _npy(w), "b.npy": _npy(np.full(3, 7, np.int32))})
    if how == "misshapen":
        return _zip(path, {"w.npy": _npy(w), "b.npy": _npy(np.full(4, 7.0))})
    marker = np.full(3, 1.2345e300)
    _zip(path, {"w.npy": _npy(w), "b.npy": _npy(marker)})
    data = bytearray(path.read_bytes())
    at = data.index(marker.tobytes())
    data[at + 5] ^= 0xFF                              # one flipped bit pattern in b's data: a bad CRC
    path.write_bytes(bytes(data))
    return str(path)


@pytest.mark.parametrize("how", ["missing", "mistyped", "misshapen", "corrupt"])
def test_a_restore_changes_nothing_when_one_entry_is_bad(tmp_path, how):
    path = _b_spoiled(tmp_path / "m.npz", how)
    w, b = _w_and_b()
    ckpt = dfc.Checkpoint({"w": w, "b": b})

    @dfc.function
    def restore():
        ckpt.restore(path)
        return w.read_value()

    g = restore.trace()
    for where, make in PATHS.items():
        with pytest.raises(dfc.DfcRuntimeError) as e:
            make(g).call()
        assert "'b'" in str(e.value) and path in str(e.value), (where, str(e.value))
        assert e.value.node is not None, where
        np.testing.assert_array_equal(w.numpy(), [0, 0], err_msg=f"{where}: w restored, b not")
    with pytest.raises(dfc.DfcError, match="'b'"):
        ckpt.restore(path)                                            # eagerly: the same
    np.testing.assert_array_equal(w.numpy(), [0, 0])


# ---------------------------------------------------------------- one snapshot per restore
def _save_between_reads(monkeypatch, path, later):
    """Replace `path` by the file `later` right after the restore opens its first variable's data."""
    real = zipfile.ZipFile.open
    swapped = []

    def open_then_resave(self, name, *args, **kw):
        f = real(self, name, *args, **kw)
        if not swapped:
            swapped.append(name)
            os.replace(later, path)                   # what a concurrent save's rename does
        return f
    monkeypatch.setattr(zipfile.ZipFile, "open", open_then_resave)
    return swapped


@pytest.mark.parametrize("where", ["eager", "reference interpreter", "executor pi=32 pool"])
def test_a_save_between_two_variables_reads_does_not_tear_the_restore(tmp_path, monkeypatch, where):
    path, later = str(tmp_path / "m.npz"), str(tmp_path / "later.npz")
    np.savez(path, **_pair(1.0))
    np.savez(later, **_pair(2.0))
    w, b = _w_and_b()
    ckpt = dfc.Checkpoint({"w": w, "b": b})
    if where != "eager":
        session = PATHS[where](dfc.trace(lambda: ckpt.restore(path)))
    swapped = _save_between_reads(monkeypatch, path, later)
    if where == "eager":
        ckpt.restore(path)
    else:
        session.call()
    assert swapped, "the restore read no member"
    assert w.numpy()[0] == b.numpy()[0], f"torn: w from save {w.numpy()[0]}, b from save {b.numpy()[0]}"
    with np.load(path) as z:
        assert z["w"][0] == 2.0                        # the file did change in between


RACING_SAVER = textwrap.dedent("""
    import sys, numpy as np, dfc
    w = dfc.Variable(np.zeros(1 << 14), name="w")
    b = dfc.Variable(np.zeros(1 << 14), name="b")
    ckpt = dfc.Checkpoint({"w": w, "b": b})
    k = 0.0
    while True:
        k += 1.0
        w.assign(np.full(1 << 14, k))
        b.assign(np.full(1 << 14, k))
        ckpt.save(sys.argv[1])
        if k == 1.0:
            print("saved", flush=True)
""")


def test_restores_racing_another_processes_saves_are_never_torn(tmp_path):
    path = str(tmp_path / "race.npz")
    script = tmp_path / "saver.py"
    script.write_text(RACING_SAVER)
    w = dfc.Variable(np.zeros(1 << 14), name="w")
    b = dfc.Variable(np.zeros(1 << 14), name="b")
    ckpt = dfc.Checkpoint({"w": w, "b": b})
    p = clitools.start_python(script, path, stderr=None)
    try:
        assert p.stdout.readline().strip() == "saved"
        seen = set()
        for _ in range(300):
            ckpt.restore(path)
            assert w.numpy()[0] == b.numpy()[0], f"torn: w from save {w.numpy()[0]}, b from {b.numpy()[0]}"
            seen.add(float(w.numpy()[0]))
    finally:
        p.kill()
        p.wait()
    assert len(seen) > 1                               # the saves did race the restores


# ---------------------------------------------------------------- crafted files
def _crafted(tmp_path, kind):
    path = tmp_path / "m.npz"
    if kind == "a .npy named .npz":
        path.write_bytes(_npy(np.zeros(2)))
        return str(path), "not a .npz"
    if kind == "a member that is not .npy":
        return _zip(path, {"w.npy": b"just some text, no magic"}), "'w'"
    if kind == "a header claiming 10**12 elements":
        return _zip(path, {"w.npy": _npy_header("float64", (10 ** 12,)) + b"\0" * 64}), r"float64\[1000000000000\]"
    if kind == "an object array":
        return _zip(path, {"w.npy": _npy_header("O", (2,)) + b"\0" * 64}), "'w'"
    if kind == "a deflated member declaring 256 MB":
        body = _npy_header("float64", (1 << 25,)) + bytes(1 << 20)
        return _zip(path, {"w.npy": body}, zipfile.ZIP_DEFLATED), "'w'"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["a .npy named .npz", "a member that is not .npy", "an object array",
                                  "a header claiming 10**12 elements", "a deflated member declaring 256 MB"])
def test_a_crafted_file_is_a_dfc_error_within_bounded_memory(tmp_path, kind):
    path, says = _crafted(tmp_path, kind)
    w = dfc.Variable(np.zeros(2), name="w")
    tracemalloc.start()
    try:
        with pytest.raises(dfc.DfcError, match=says) as e:
            dfc.Checkpoint({"w": w}).restore(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert path in str(e.value)
    assert peak < 8 << 20, f"restoring 16 bytes allocated {peak} bytes"
    g = dfc.trace(lambda: dfc.Checkpoint({"w": w}).restore(path)[0])
    with pytest.raises(dfc.DfcRuntimeError, match=says) as e:
        g()
    assert e.value.node is not None
    np.testing.assert_array_equal(w.numpy(), [0, 0])


def test_mutated_checkpoints_restore_whole_or_raise_a_dfc_error(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, w=np.arange(4.0), b=np.arange(3, dtype=np.int64))
    deflated = tmp_path / "deflated.npz"
    np.savez_compressed(deflated, w=np.arange(4.0), b=np.arange(3, dtype=np.int64))
    w = dfc.Variable(np.zeros(4), name="w")
    b = dfc.Variable(np.zeros(3, np.int64), name="b")
    ckpt = dfc.Checkpoint({"w": w, "b": b})
    rng = random.Random(0)
    path = tmp_path / "m.npz"
    outcomes = {"restored": 0, "refused": 0}
    for i in range(400):
        data = bytearray((good if i % 2 else deflated).read_bytes())
        if i % 5 == 0:
            data = data[:rng.randrange(len(data))]
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        w.assign(np.zeros(4))
        b.assign(np.zeros(3, np.int64))
        try:
            ckpt.restore(str(path))
        except dfc.DfcError:
            outcomes["refused"] += 1
            assert not w.numpy().any() and not b.numpy().any(), f"mutant {i}: partly restored"
            continue
        outcomes["restored"] += 1
        assert w.numpy().dtype == np.float64 and w.numpy().shape == (4,)
        assert b.numpy().dtype == np.int64 and b.numpy().shape == (3,)
    assert outcomes["refused"] > 0


def test_a_graph_with_unknown_dims_bounds_a_restore_by_the_data_present(tmp_path):
    path = _zip(tmp_path / "m.npz", {"w.npy": _npy_header("float64", (1 << 40,)) + bytes(4096)},
                zipfile.ZIP_DEFLATED)

    def restore():
        b = dfc.compiler.tracing.current_builder()
        return b.make("Restore", (), {"path": path, "names": ["w"], "dtypes": ["float64"], "shapes": [[None]]})[0]
    g = dfc.trace(restore)
    tracemalloc.start()
    try:
        with pytest.raises(dfc.DfcRuntimeError, match="'w'") as e:
            g()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.node is not None and path in str(e.value)
    assert peak < 8 << 20, f"a 4 KB member allocated {peak} bytes"


# ---------------------------------------------------------------- temporaries of killed saves
STOPPED_SAVER = textwrap.dedent("""
    import os, signal, sys, numpy as np, dfc
    path, how = sys.argv[1], sys.argv[2]
    rename = os.replace

    def stop_before_rename(src, dst):           # the moment a save is most exposed: all written
        if how == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        print("writing", flush=True)
        sys.stdin.readline()                    # held mid-save until the test lets it go on
        rename(src, dst)

    os.replace = stop_before_rename
    dfc.Checkpoint({"w": dfc.Variable(np.full(1000, 5.0), name="w")}).save(path)
""")


def _temporaries(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith(".dfc-save-"))


def test_a_save_removes_the_temporaries_of_killed_saves_but_not_of_live_ones(tmp_path):
    path = str(tmp_path / "m.npz")
    script = tmp_path / "saver.py"
    script.write_text(STOPPED_SAVER)
    killed = clitools.python(script, path, "die")
    assert killed.returncode < 0, killed.stderr
    dead = _temporaries(tmp_path)
    assert len(dead) == 1                                        # what a killed save leaves
    live = clitools.start_python(script, path, "hold", stdin=subprocess.PIPE, stderr=None)
    try:
        assert live.stdout.readline().strip() == "writing"
        held = [f for f in _temporaries(tmp_path) if f not in dead]
        assert len(held) == 1
        dfc.Checkpoint({"w": dfc.Variable(np.zeros(1000), name="w")}).save(path)
        assert _temporaries(tmp_path) == held                   # the dead writer's is gone, the live one's kept
        live.stdin.write("\n")
        live.stdin.flush()
        assert live.wait() == 0
    finally:
        live.kill()
        live.wait()
    assert _temporaries(tmp_path) == []
    with np.load(path) as z:
        np.testing.assert_array_equal(z["w"], np.full(1000, 5.0))   # the held save completed
