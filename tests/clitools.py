"""Running `dfc` and Python scripts in a child process, as a user would: the one helper the tests share.

The child is this interpreter (`sys.executable`) with the checkout on PYTHONPATH, so it imports the dfc
under test; it runs in the repository root unless `cwd` says otherwise. `env` adds variables to the
current environment; stdout and stderr come back as text.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# DFC_TEST_DEVICE=strict|gpu: children start with tests/device_site/sitecustomize.py, which places their
# Sessions on that device as tests/conftest.py places the test process's
DEVICE_SITE = os.path.join(ROOT, "tests", "device_site")


def environ(env=None):
    path = ROOT if os.environ.get("DFC_TEST_DEVICE", "cpu") == "cpu" else os.pathsep.join([DEVICE_SITE, ROOT])
    return dict(os.environ, PYTHONPATH=path, **(env or {}))


def python(*args, cwd=ROOT, env=None, **kw):
    """`python ARGS` to completion; a CompletedProcess. Pass stdout=... to send the output elsewhere."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, *map(str, args)], text=True, cwd=cwd, env=environ(env), **kw)


def start_python(*args, cwd=ROOT, env=None, **kw):
    """`python ARGS` started and left running (a Popen, by default with stdout and stderr pipes)."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, *map(str, args)], text=True, cwd=cwd, env=environ(env), **kw)


def dfc(*args, **kw):
    """`dfc ARGS` to completion, whatever its exit status."""
    return python("-m", "dfc.cli", *args, **kw)


def start_dfc(*args, **kw):
    return start_python("-m", "dfc.cli", *args, **kw)


def dfc_ok(*args, **kw):
    """`dfc ARGS`, which must succeed; its standard output."""
    r = dfc(*args, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout
