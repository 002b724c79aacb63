"""Competitor systems for the LSTM comparison, each run in a subprocess: by default with this interpreter
(jax and torch come with dfc's `bench` extra: pip install -e '.[bench]'); with --install-competitors,
in benchmarks/.venv-competitors, where tensorflow-cpu, jax and torch are installed (never dfc
dependencies)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(os.path.dirname(HERE), ".venv-competitors")
PACKAGES = {"tensorflow": ["tensorflow-cpu"], "jax": ["jax", "jaxlib"], "torch": ["torch==2.13.0"]}
SCRIPTS = {"tensorflow": "tf_bench.py", "jax": "jax_bench.py", "torch": "torch_bench.py"}
IMPORTS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


USE_VENV = False


def python():
    return os.path.join(VENV, "bin", "python") if USE_VENV else sys.executable


def ensure(log=print, install=False):
    """{name: version or None} of each competitor in the interpreter python() names; with install, create
    benchmarks/.venv-competitors and install them there first (and use it from then on)."""
    global USE_VENV
    if not install:
        return {name: _version(name) for name in PACKAGES}
    USE_VENV = True
    if not os.path.exists(python()):
        log(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python(), "-m", "pip", "install", "-q", "--upgrade", "pip", "numpy"], check=False)
    versions = {}
    for name, pkgs in PACKAGES.items():
        v = _version(name)
        if v is None:
            log(f"installing {' '.join(pkgs)} into {VENV}")
            subprocess.run([python(), "-m", "pip", "install", "-q", *pkgs], check=False)
            v = _version(name)
        versions[name] = v
    return versions


def _version(name):
    r = subprocess.run([python(), "-c", f"import {IMPORTS[name]} as m; print(m.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def run(name, config, timeout=1800):
    """Run one competitor task; returns its JSON result or {"error": ...}."""
    try:
        r = subprocess.run([python(), os.path.join(HERE, SCRIPTS[name]), json.dumps(config)],
                           capture_output=True, text=True, timeout=timeout,
                           env=_env())
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _env():
    """The competitor's environment: its malloc tuned as dfc's Session tunes this process's (the same
    conditions for every system, benchmarks/harness.py)."""
    from benchmarks.harness import MALLOC
    from dfc.runtime.host_memory import KEPT, TUNABLES
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if MALLOC == KEPT:
        env["GLIBC_TUNABLES"] = ":".join(x for x in (env.get("GLIBC_TUNABLES"), TUNABLES) if x)
    return env
