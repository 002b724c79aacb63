"""Generated frame modules on disk, so numba's own cache (cache=True) spares a second process the compile.

Each frame's source is written once to `<cache dir>/dfc_frame_<hash>.py`, the hash taken over the source
and the helper modules it calls (a changed helper gives new module files, so numba never loads machine
code built against an old helper); numba keeps the machine code in `__pycache__` beside it, keyed by the
argument types. The cache dir is $DFC_CACHE_DIR, else ~/.cache/dfc (a temporary dir if neither is
writable).
"""
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

_lock = threading.Lock()
_modules = {}
_helper_hash = None


def cache_dir():
    """Where generated frame modules and numba's machine code live."""
    d = os.environ.get("DFC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dfc")
    d = os.path.join(d, "numba")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    d = os.path.join(tempfile.gettempdir(), f"dfc-numba-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(d, exist_ok=True)
    return d


def _helpers():
    global _helper_hash
    if _helper_hash is None:
        h = hashlib.sha256()
        here = os.path.dirname(__file__)
        for name in ("helpers.py", "npcall.py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        import numba
        import numpy
        h.update(f"{numba.__version__} {numpy.__version__}".encode())
        _helper_hash = h.hexdigest()
    return _helper_hash


def module_key(source):
    return hashlib.sha256((_helpers() + source).encode()).hexdigest()[:24]


def is_cached(source):
    """Whether numba has machine code of this source's module on disk (for some argument types)."""
    key = module_key(source)
    return key in _modules or _on_disk(key)     # loaded in this process already, or on disk


def on_disk(source):
    """Whether numba's machine code of this source's module is in the disk cache (for some argument types)."""
    return _on_disk(module_key(source))


def _on_disk(key):
    pyc = os.path.join(cache_dir(), "__pycache__")
    try:
        return any(f.startswith(f"dfc_frame_{key}.run-") and f.endswith(".nbi") for f in os.listdir(pyc))
    except OSError:
        return False


def load(source):
    """The `run` function of the module with this source (written to the cache dir once)."""
    key = module_key(source)
    with _lock:
        mod = _modules.get(key)
        if mod is None:
            name = f"dfc_frame_{key}"
            path = os.path.join(cache_dir(), name + ".py")
            if not os.path.exists(path):
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as f:
                    f.write(source)
                os.replace(tmp, path)
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            _modules[key] = mod
    return mod.run, key
