"""The disk cache of compiled loops (dfc/runtime/compiled/cache.py) never runs what someone else planted:
its directories are made private (0700), a directory another user owns or can write is refused (one
warning, loops compile in memory, answers unchanged), a module file is run only once its bytes match its
key, and numba's index pickles are never read from a refused directory."""
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import dfc
from tests.compiledtools import without_jax  # noqa: F401 (fixture)
from dfc.ir import structure
from tests.compiledtools import _no_compile_budget, frames_alone  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.usefixtures("frames_alone"),
              pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")]
pytest.importorskip("numba")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AS_ROOT = hasattr(os, "getuid") and os.getuid() == 0
NOBODY = 65534


class _Plant:
    """Unpickling it creates the file `marker` (as a planted .nbi index would run any code)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def _graph(scale):
    return dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * scale + x), (0, x)),
                     dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))


def _frame(s, g):
    sig = g.signature
    plan = s.plan([leaf["ref"] for leaf in structure.leaves(sig.get("outputs"))], [i["node"] for i in sig["inputs"]],
                  tuple(sig.get("targets", [])))
    return next(iter(plan.programs.values()))


def _index_name(key, source):
    """The name numba gives the index of `run` in the module dfc_frame_<key>.py (checked against numba's
    own in test_a_warm_private_cache_serves_a_second_process)."""
    line = 1 + next(i for i, t in enumerate(source.splitlines()) if t.startswith("@njit("))
    return f"dfc_frame_{key}.run-{line}.py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}.nbi"


def _run(g, x=np.array([1.0, 2.0, 3.0]), n=np.int64(20)):
    """(frame, output) of a compiled run, and the reference interpreter's output."""
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    out = s.call(x, n)[1]
    return _frame(s, g), out, dfc.Session(g, mode="reference").call(x, n)[1]


def _made(path, mode, owner=None):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)


def _dfc_warnings(record):
    return [w for w in record if "disk cache of compiled loops" in str(w.message)]


def test_fresh_cache_dirs_are_private(monkeypatch, tmp_path):
    from dfc.runtime.compiled import cache
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "home" / "cache"))
    old = os.umask(0)           # the modes must not depend on a strict umask
    try:
        d = cache.cache_dir()
    finally:
        os.umask(old)
    assert d == str(tmp_path / "home" / "cache" / "numba")
    for p in ("home", "home/cache", "home/cache/numba", "home/cache/numba/__pycache__"):
        assert os.stat(tmp_path / p).st_mode & 0o777 == 0o700, p


BAD = {"world-writable": dict(mode=0o777)}
if AS_ROOT:
    BAD["another user's"] = dict(mode=0o755, owner=NOBODY)
    BAD["another user's, world-writable"] = dict(mode=0o777, owner=NOBODY)


@pytest.mark.parametrize("where", ["", "numba", "numba/__pycache__"])
@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_directory_others_can_write_or_own_is_refused_with_one_warning(monkeypatch, tmp_path, where, bad):
    from dfc.runtime.compiled import cache
    base = tmp_path / "c"
    for p in ("", "numba", "numba/__pycache__"):
        _made(base / p, 0o700)
    _made(base / where, **BAD[bad])
    monkeypatch.setenv("DFC_CACHE_DIR", str(base))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert cache.cache_dir() is None and cache.cache_dir() is None
        assert not cache.on_disk("anything")
    assert len(_dfc_warnings(record)) == 1, [str(w.message) for w in record]
    assert str(base / where).rstrip("/") in str(_dfc_warnings(record)[0].message)


def test_a_symbolic_link_in_the_chain_is_refused(monkeypatch, tmp_path):
    from dfc.runtime.compiled import cache
    _made(tmp_path / "c", 0o700)
    _made(tmp_path / "elsewhere", 0o700)
    os.symlink(tmp_path / "elsewhere", tmp_path / "c" / "numba")
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    with pytest.warns(UserWarning, match="symbolic link"):
        assert cache.cache_dir() is None


def test_numbas_own_cache_dir_must_be_private_too(monkeypatch, tmp_path):
    import numba
    from dfc.runtime.compiled import cache
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    _made(tmp_path / "shared", 0o777)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "shared"))
    with pytest.warns(UserWarning, match="written by other users"):
        assert cache.cache_dir() is None


@pytest.mark.parametrize("plant", ["module", "index"])
def test_nothing_planted_in_a_refused_directory_runs(monkeypatch, tmp_path, plant):
    """A cache dir another user made world-writable holds a module file, or a numba index pickle, for the
    very frame the program compiles: neither runs, the answer is right, one warning says why."""
    from dfc.runtime.compiled import cache
    base, marker = tmp_path / "c", tmp_path / "planted-code-ran"
    _made(base, 0o700)
    _made(base / "numba", 0o777, owner=NOBODY if AS_ROOT else None)
    _made(base / "numba" / "__pycache__", 0o777, owner=NOBODY if AS_ROOT else None)
    monkeypatch.setenv("DFC_CACHE_DIR", str(base))
    g = _graph({"module": 0.5, "index": 0.375}[plant])      # a frame of its own: none loaded already
    src = _frame(dfc.Session(g, compile_loops=True, num_threads=0), g).source
    key = cache.module_key(src)
    if plant == "module":
        (base / "numba" / f"dfc_frame_{key}.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                                            "def run(*args):\n    return ()\n")
    else:
        (base / "numba" / "__pycache__" / _index_name(key, src)).write_bytes(pickle.dumps(_Plant(str(marker))))
    before = sorted(os.listdir(base / "numba"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        f, got, want = _run(g)
    assert not marker.exists()
    np.testing.assert_array_equal(got, want)
    assert f.runs == {"compiled": 1, "fused": 0}            # compiled in memory instead
    assert len(_dfc_warnings(record)) == 1
    assert sorted(os.listdir(base / "numba")) == before     # and nothing written there


def test_without_a_disk_cache_auto_starts_no_child_and_stays_fused(monkeypatch, tmp_path, without_jax):
    from dfc.runtime import compiled
    _made(tmp_path / "c", 0o777)
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    g = _graph(0.625)
    x, n = np.array([1.0, 2.0, 3.0]), np.int64(6)
    want = dfc.Session(g, mode="reference").call(x, n)[1]
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    with pytest.warns(UserWarning, match="disk cache of compiled loops"):
        np.testing.assert_array_equal(s.call(x, n)[1], want)
        f = _frame(s, g)
        f.fused_seconds = compiled.AUTO_SECONDS          # as if its fused runs had taken that long
        np.testing.assert_array_equal(s.call(x, n)[1], want)
    assert f._job is not None and f._job.poll() is False and f._job._proc is None
    assert "private disk cache" in f._job.error
    np.testing.assert_array_equal(s.call(x, n)[1], want)
    assert f.runs == {"compiled": 0, "fused": 3}


def test_a_planted_module_in_the_private_cache_is_replaced_not_run(monkeypatch, tmp_path):
    from dfc.runtime.compiled import cache
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    marker = tmp_path / "planted-code-ran"
    g = _graph(0.25)
    src = _frame(dfc.Session(g, compile_loops=True, num_threads=0), g).source
    path = os.path.join(cache.cache_dir(), f"dfc_frame_{cache.module_key(src)}.py")
    with open(path, "w") as fh:
        fh.write(f"open({str(marker)!r}, 'w').close()\ndef run(*args):\n    return ()\n")
    f, got, want = _run(g)
    assert not marker.exists()
    np.testing.assert_array_equal(got, want)
    assert f.runs == {"compiled": 1, "fused": 0}
    with open(path) as fh:
        assert fh.read() == src


def test_the_background_child_runs_only_a_module_that_matches_its_key(monkeypatch, tmp_path):
    from dfc.runtime.compiled import background, cache
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    marker = tmp_path / "planted-code-ran"
    path = os.path.join(cache.cache_dir(), "dfc_frame_0123456789abcdef01234567.py")
    with open(path, "w") as fh:
        fh.write(f"open({str(marker)!r}, 'w').close()\n")
    job = background.start(path, (), "while")
    deadline = time.monotonic() + 120
    while job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.poll() is False and "key" in job.error
    assert not marker.exists()
    outside = background.start(str(tmp_path / "dfc_frame_0123456789abcdef01234567.py"), (), "while")
    assert outside.poll() is False and "private disk cache" in outside.error     # no child at all


def test_a_warm_private_cache_serves_a_second_process(monkeypatch, tmp_path):
    from dfc.runtime.compiled import cache
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path / "c"))
    g = _graph(0.75)
    f, got, want = _run(g)
    np.testing.assert_array_equal(got, want)
    key = cache.module_key(f.source)
    assert _index_name(key, f.source) in os.listdir(os.path.join(cache.cache_dir(), "__pycache__"))
    script = textwrap.dedent("""
        import json, numpy as np, dfc
        from dfc.runtime import compiled
        from dfc.runtime.compiled import cache
        g = dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.75 + x), (0, x)),
                      dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        from tests.runtime.test_cache_security import _frame
        src = _frame(s, g).source
        warm = [cache.on_disk(src), cache.is_cached(src)]
        out = s.call(np.array([1.0, 2.0, 3.0]), np.int64(20))[1]
        print(json.dumps({"warm": warm, "stats": compiled.stats(), "out": out.tolist()}))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, DFC_COMPILE_ROOT="0")      # the frame alone, as here
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0, r.stderr
    second = json.loads(r.stdout.strip().splitlines()[-1])
    assert second["warm"] == [True, True]
    assert [(st["key"], st["cached"]) for st in second["stats"]] == [(key, True)]
    assert second["out"] == want.tolist()
