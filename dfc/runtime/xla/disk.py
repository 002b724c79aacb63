"""Compiled XLA runs on disk, so a second process runs compiled from its first call (no trace, no compile).

An entry is `<cache>/xla/<key>.pkl`: the executable as JAX serializes it
(jax.experimental.serialize_executable) with what the program learned (buffer rows, TensorArray lengths,
what each stack holds). The key hashes the graph's JSON, the run's fetches, feeds and targets, the feeds'
shapes and dtypes, the jax and jaxlib versions, the lowering's code (dfc/runtime/xla and the kernels) and
the CPU (its architecture and feature flags: machine code built for another CPU must not be loaded). An entry is written once a run's compiled code has proved
faster than the fused path in the process that compiled it.

Entries are pickles, trusted as numba's machine code is (dfc/runtime/compiled/cache.py): only in a
directory private to this user (mode 0700, owned by the user, its ancestors not writable by others);
otherwise nothing is read or written.
"""
import functools
import hashlib
import json
import os
import platform
from importlib import metadata

from dfc.ir import serialize


def directory():
    """`<cache>/xla`, private to this user, or None (no disk cache: compiled/cache.py says why)."""
    from dfc import config
    from dfc.runtime.compiled.cache import Refused, private, private_tree
    try:
        d = os.path.join(private_tree(config.cache_dir()), "xla")
        private(d)
    except Refused:
        return None
    return d


@functools.lru_cache(maxsize=1)
def _lowering():
    """A hash of the lowering's code (dfc/runtime/xla and the kernels it follows): an executable built by
    other code (another dfc version, a changed lowering) is never loaded."""
    import dfc.runtime.kernels as kernels
    h = hashlib.sha256()
    for d in (os.path.dirname(__file__), os.path.dirname(kernels.__file__)):
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _platform():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    versions = []
    for package in ("jax", "jaxlib"):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            versions.append(None)
    return [platform.machine(), flags.strip(), versions]


def graph_digest(graph):
    return hashlib.sha256(serialize.to_json(graph).encode()).hexdigest()


def entry(digest, fetches, feed_names, targets, feeds):
    """The path of the entry of this run with these feeds, or None without a private cache directory."""
    d = directory()
    if d is None:
        return None
    what = [digest, list(fetches), list(feed_names), list(targets),
            [[list(f.shape), f.dtype.str] for f in feeds], _platform(), _lowering()]
    return os.path.join(d, hashlib.sha256(json.dumps(what).encode()).hexdigest()[:40] + ".pkl")
