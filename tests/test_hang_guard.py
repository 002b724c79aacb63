"""The suite's hang guard: a test that blocks forever fails alone, with every thread's stack, instead of
using up CI's time (pyproject.toml sets pytest-timeout's limit and its thread method)."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_hung_test_fails_with_a_stack_dump_under_the_projects_settings(tmp_path):
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent("""
        import threading

        def test_blocks_forever():
            threading.Event().wait()      # blocked in a lock's C wait, as a ray.get with no timeout is
    """))
    # the project's own pytest settings (its ini file), only the limit shortened
    cmd = [sys.executable, "-m", "pytest", "-c", os.path.join(ROOT, "pyproject.toml"), "--rootdir", str(tmp_path),
           "-p", "no:cacheprovider", "-o", "timeout=3", str(tmp_path / "test_hangs.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Timeout" in out, out
    assert "test_blocks_forever" in out, out      # the stack dump shows where it hung
