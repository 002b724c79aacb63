"""Generated frame modules on disk, so numba's own cache (cache=True) spares a second process the compile.

Each frame's source is written to `<cache>/numba/dfc_frame_<key>.py`, the key a hash of the source and of
the helper modules it calls (a changed helper gives new module files, so numba never loads machine code
built against an old helper); numba keeps the machine code in `<cache>/numba/__pycache__` beside it
($NUMBA_CACHE_DIR/numba_<hash> if that is set), keyed by the argument types. `<cache>` is $DFC_CACHE_DIR,
else ~/.cache/dfc (dfc.config.cache_dir).

What is trusted, and why:
- A module file is never imported as found. Its bytes are compared with the source its key was computed
  from; a different file (stale, truncated, planted) is replaced atomically, and the module is executed
  from the verified bytes, never re-read and never from a .pyc. A child process (background.py) runs a
  module file only if its content hashes to the key in its name.
- numba's index (.nbi) and machine-code (.nbc) files are pickles, which cannot be verified that way: they
  are trusted only because every directory they live in is private to this user. So each directory on the
  chain (`<cache>`, `<cache>/numba`, its `__pycache__`; $NUMBA_CACHE_DIR and its subdirectory when set) is
  created with mode 0700, and an existing one is used only if it is a real directory (not a symbolic link),
  owned by this user and writable by no one else, and if its ancestors (after resolving the path given)
  are owned by this user or root and not writable by others without the sticky bit (as /tmp has).
- Otherwise dfc warns once and runs without a disk cache: frames compile in memory (numba without
  cache=True), nothing is read from or written to any cache directory, and compile_loops="auto" keeps
  frames on the fused path (its child process hands machine code over through the cache only).
"""
import hashlib
import linecache
import os
import re
import stat
import sys
import tempfile
import threading
import types
import warnings

_lock = threading.Lock()        # loading modules
_dir_lock = threading.Lock()    # checking directories
_modules = {}                   # (frames dir, or None in memory, key) -> module
_dirs = {}                      # (dfc's cache dir, numba's) -> (frames dir, index dir), or None: refused
_helper_hash = None
_uid = os.getuid() if hasattr(os, "getuid") else None     # no owners or modes to check elsewhere (Windows)
_CACHE_TRUE = re.compile(r"^(@njit\(.*)\bcache=True\b", re.M)


class Refused(Exception):
    """A cache directory or module file dfc will not use (the message says why)."""


def cache_dir():
    """The private directory of the generated frame modules, or None: no disk cache (module docstring)."""
    dirs = _checked_dirs()
    return dirs[0] if dirs else None


def _checked_dirs():
    import numba
    from dfc import config
    where = (config.cache_dir(), numba.config.CACHE_DIR or "")
    with _dir_lock:
        if where not in _dirs:
            try:
                _dirs[where] = _prepare(*where)
            except Refused as e:
                _dirs[where] = None
                warnings.warn(f"dfc does not use its disk cache of compiled loops: {e}. Loops compile in "
                              "memory, in each process anew (compile_loops='auto' leaves them fused); make "
                              "the directory yours and private (chmod 700) or set DFC_CACHE_DIR to one that "
                              "only you can write", stacklevel=4)
        return _dirs[where]


def _prepare(base, numba_dir):
    frames = os.path.join(private_tree(base), "numba")
    private(frames)
    if numba_dir:           # numba then keeps its index and machine code there, not in __pycache__
        from numba.core.caching import _CacheLocator
        sub = _CacheLocator.get_suitable_cache_subpath(os.path.join(frames, "dfc_frame.py"))
        index = os.path.join(private_tree(numba_dir), sub)
    else:
        index = os.path.join(frames, "__pycache__")
    private(index)
    return frames, index


def private_tree(path):
    """`path` resolved, made (with missing parents) private, once it and its ancestors pass the checks."""
    path = os.path.realpath(os.path.expanduser(path))
    missing = []
    p = path
    while not os.path.lexists(p) and os.path.dirname(p) != p:
        missing.append(p)
        p = os.path.dirname(p)
    for p in reversed(missing):
        private(p)
    p = os.path.dirname(path)
    while True:
        try:
            st = os.stat(p)
        except OSError as e:
            raise Refused(f"cannot inspect {p} ({e.strerror})") from None
        if _uid is not None and (st.st_uid not in (_uid, 0) or
                                 (st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX)):
            raise Refused(f"{p}, a parent of {path}, can be changed by another user")
        if os.path.dirname(p) == p:
            break
        p = os.path.dirname(p)
    private(path)
    return path


def private(path):
    """Make directory `path` (mode 0700) unless it exists; Refused unless it is a private one of ours."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        if not os.path.isdir(path):
            raise Refused(f"cannot create {path} ({e.strerror})") from None
    try:
        st = os.lstat(path)
    except OSError as e:
        raise Refused(f"cannot inspect {path} ({e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{path} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{path} is not a directory")
    if _uid is not None and st.st_uid != _uid:
        raise Refused(f"{path} belongs to user id {st.st_uid}, not to you ({_uid})")
    if _uid is not None and st.st_mode & 0o022:
        raise Refused(f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})")
    if not os.access(path, os.W_OK | os.X_OK):
        raise Refused(f"{path} is not writable")


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
    return (cache_dir(), key) in _modules or _on_disk(key)     # loaded in this process already, or on disk


def on_disk(source):
    """Whether numba's machine code of this source's module is in the disk cache (for some argument types)."""
    return _on_disk(module_key(source))


def _on_disk(key):
    dirs = _checked_dirs()
    if dirs is None:
        return False
    try:
        return any(f.startswith(f"dfc_frame_{key}.run-") and f.endswith(".nbi") for f in os.listdir(dirs[1]))
    except OSError:
        return False


def load(source):
    """The `run` function of the module with this source, and its key: from its verified file in the cache
    dir (numba finds machine code beside it), or compiled in memory where there is no disk cache."""
    key = module_key(source)
    d = cache_dir()
    with _lock:
        mod = _modules.get((d, key))
        if mod is None:
            name = f"dfc_frame_{key}"
            path = d and os.path.join(d, name + ".py")
            try:
                if path:
                    _write_verified(path, source)
            except OSError:         # a full disk, say: this process compiles in memory
                path = None
            if path:
                mod = _execute(name, source, path)
            else:
                mod = _execute(name, _CACHE_TRUE.sub(r"\1cache=False", source), f"<{name}>")
            _modules[(d, key)] = mod
    return mod.run, key


def load_file(path):
    """The `run` of the frame module file `path` (for background.py's child): only a file in this user's
    private cache dir whose content gives the key in its name; anything else is Refused, unrun."""
    d = cache_dir()
    name = os.path.splitext(os.path.basename(path))[0]
    if d is None or os.path.dirname(os.path.abspath(path)) != d or not name.startswith("dfc_frame_"):
        raise Refused(f"{path} is not a frame module in dfc's private cache directory")
    try:
        with open(path, "rb") as f:
            source = f.read().decode()
    except (OSError, UnicodeDecodeError) as e:
        raise Refused(f"cannot read {path}: {e}") from None
    if module_key(source) != name[len("dfc_frame_"):]:
        raise Refused(f"{path} does not hold the source its name's key was computed from")
    return _execute(name, source, path).run


def _write_verified(path, source):
    """Make `path` hold exactly `source`: kept if it does, else replaced atomically (never run as found)."""
    data = source.encode()
    try:
        with open(path, "rb") as f:
            if f.read(len(data) + 1) == data:
                return
    except OSError:
        pass
    replace_file(path, data)


def replace_file(path, data):
    """Replace `path` atomically by the bytes `data`: a reader sees the old file or the new, never a part."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _execute(name, source, filename):
    """A module made by running `source` (already verified), with `filename` its code's file name (numba's
    cache locates the machine code by it)."""
    if filename.startswith("<"):
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)   # tracebacks
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    exec(compile(source, filename, "exec"), mod.__dict__)    # noqa: S102 — dfc's own generated source
    return mod
