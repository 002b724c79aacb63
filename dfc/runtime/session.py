"""Session: feed/fetch execution of a Graph (whitepaper §4.2).

`Session(graph).run(fetches, feeds)` runs only the subgraph the fetches (and
the graph's side-effect targets, when asked) need. Variables live in the
session and persist across runs; a Graph called directly uses one cached
session, so its variables persist across calls.
"""
import os
import threading

import numpy as np

from dfc import nest
from dfc.errors import DfcInputError, DfcError
from dfc.ir import dtypes as dt
from dfc.ir import structure
from dfc.ir.graph import parse_input
from dfc.runtime.executor import Plan, Run, KernelContext, default_printer

MODES = ("reference", "threads")


def default_mode():
    return os.environ.get("DFC_EXECUTOR", "threads")


class Session:
    def __init__(self, graph, mode=None, num_threads=None, parallel_iterations=None, printer=None,
                 fuse_loops=None):
        mode = mode or default_mode()
        if mode not in MODES:
            raise DfcError(f"unknown executor mode {mode!r} (use one of {', '.join(MODES)})")
        self.graph, self.mode = graph, mode
        # Loop fusion is the fast path of "threads" mode; "reference" mode never fuses.
        self.fuse_loops = (mode == "threads") if fuse_loops is None else bool(fuse_loops)
        self.parallel_iterations = parallel_iterations
        self.printer = printer or default_printer
        self.variables = {}
        self.run_count = 0
        self._plans = {}
        self._pool = None
        self._num_threads = num_threads or min(4, os.cpu_count() or 2)
        self._lock = threading.Lock()
        graph.verify()

    def _get_pool(self):
        if self.mode != "threads":
            return None
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(self._num_threads, thread_name_prefix="dfc-kernel")
        return self._pool

    def plan(self, fetches, feed_names, targets):
        key = (tuple(fetches), tuple(sorted(feed_names)), tuple(targets))
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = Plan(self.graph, fetches, set(feed_names), targets,
                                        parallel_iterations=self.parallel_iterations, fuse=self.fuse_loops)
        return p

    def run(self, fetches, feeds=None, targets=()):
        """Fetch a tensor ref ("node:port" or node name) or a nested structure of them."""
        flat = [f if ":" in f else f + ":0" for f in nest.flatten(fetches)]
        feeds = {self._feed_name(k): v for k, v in (feeds or {}).items()}
        types = self.graph.infer_types()
        for name in list(feeds):
            t = types[name][0]
            feeds[name] = convert_input(feeds[name], t.dtype, t.shape, name)
        plan = self.plan(flat, feeds.keys(), tuple(targets))
        with self._lock:
            self.run_count += 1
            ctx = KernelContext(self.variables, self.run_count, self.printer)
            values = Run(plan, feeds, ctx, self._get_pool()).execute()
        return nest.pack_sequence_as(fetches, [_to_numpy(v) for v in values])

    def _feed_name(self, key):
        name, port, _ = parse_input(key)
        if name not in self.graph.nodes:
            raise DfcInputError(f"feed {key!r} names no node")
        if port != 0:
            raise DfcInputError(f"can only feed output 0 of a node, not {key!r}")
        return name

    def call(self, *args, **kwargs):
        """Run the graph's signature: positional/keyword inputs in, outputs in their nesting."""
        return structure.pack(self.graph.signature.get("outputs"), self.call_flat(*args, **kwargs))

    def call_flat(self, *args, **kwargs):
        """Like call, but the outputs flattened depth-first in return order."""
        sig = self.graph.signature
        inputs = sig.get("inputs", [])
        names = [i["name"] for i in inputs]
        if len(args) > len(names):
            raise DfcInputError(f"{sig.get('name')} takes {len(names)} inputs ({', '.join(names)}), "
                                f"got {len(args)}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise DfcInputError(f"{sig.get('name')} has no input {k!r} (inputs: {', '.join(names)})")
            if k in given:
                raise DfcInputError(f"input {k!r} given twice")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise DfcInputError(f"missing input(s) {', '.join(missing)} for {sig.get('name')}")
        feeds = {}
        for spec in inputs:
            feeds[spec["node"]] = convert_input(given[spec["name"]], spec["dtype"], spec.get("shape"),
                                                spec["name"])
        leaves = structure.leaves(sig.get("outputs"))
        refs = [leaf["ref"] for leaf in leaves]
        return self.run(refs, feeds, targets=tuple(sig.get("targets", [])))


def _to_numpy(v):
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "get") and hasattr(v, "__cuda_array_interface__"):
        return v.get()
    return np.asarray(v)


def convert_input(value, dtype, shape, name):
    """numpy value of `dtype` for an input; only value-preserving conversions are allowed."""
    try:
        arr = np.asarray(value)
    except Exception as e:   # noqa: BLE001 — any object numpy cannot take is a bad input
        raise DfcInputError(f"input {name!r}: cannot convert {type(value).__name__} to an array: {e}") from None
    if arr.dtype.name != dtype:
        src, dst = arr.dtype.kind, np.dtype(dtype).kind
        ok = src in "biuf" and (src == dst or (src == "f" and dst == "f") or (src in "iu" and dst in "if")
                                or (src == "b" and dst in "iuf"))
        if ok:
            conv = arr.astype(dtype)
            if src != "f":
                with np.errstate(all="ignore"):
                    ok = bool(np.array_equal(conv.astype(arr.dtype), arr))
        if not ok:
            raise DfcInputError(f"input {name!r}: expected {dtype}, got {arr.dtype} (converting would change "
                                f"the values)")
        arr = conv
    if shape is not None:
        if arr.ndim != len(shape):
            raise DfcInputError(f"input {name!r}: expected rank {len(shape)} {dt.format_shape(shape)}, "
                                f"got shape {list(arr.shape)}")
        for d, (want, got) in enumerate(zip(shape, arr.shape)):
            if want is not None and want != got:
                raise DfcInputError(f"input {name!r}: dimension {d} must be {want}, got {got} "
                                    f"(shape {list(arr.shape)})")
    return arr
