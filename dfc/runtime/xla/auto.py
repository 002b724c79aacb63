"""The default mode's compiled path (compile_loops="auto"): a Session's run compiled whole to XLA.

A run made at least START_CALLS times that has spent START_SECONDS on the fused path gets a background
thread that traces it (Lowerer) and compiles it with XLA, as JAX compiles a jitted function; the fused path
keeps serving the calls meanwhile (sharing the GIL with the thread while it traces). A run made once (a
script, `dfc run`) never starts a compile that its process would then wait for at exit. Once compiled,
the next TRIALS runs are compiled runs, timed; if their median is slower than the fused runs' median the
run goes back to the fused path for good, otherwise it stays compiled. The rule and its measurements:
docs/architecture.md ("Which compiler runs a loop, and why").

A run the lowering refuses (an op or structure XLA cannot express: NotLowerable names the node), or whose
compiled runs keep having to be compiled again (a TensorArray stacked to a length that changes from run to
run: XLA's shapes are static), stays on the fused path, whose loop frames may then compile with numba (the
Session is told: `refused`). A compiled run that flags an error (an empty stack, a TensorArray misuse, a
dead fetch) assigns nothing; the Session runs that step on the fused path, which raises the error with its
usual message, or, should the two disagree, gives the fused path's answer. A process that ends while a
compile runs waits for it (seconds at most; a thread inside XLA's compiler at interpreter shutdown would
abort the process).

A run whose compiled code proved faster is kept in the disk cache (disk.py); a later process with the same
graph and input types loads it on its first call and runs compiled from there, without fused runs first.
"""
import statistics
import threading
import time

from dfc.errors import DfcError

START_SECONDS = 0.2     # fused seconds a run spends before its compile starts (JAX compiles at once)
START_CALLS = 2         # and fused runs: a run made once (a script, `dfc run`) never waits for a compile
TRIALS = 3              # compiled runs timed against the fused runs before the choice is kept
_RECENT = 5             # fused runs whose median the compiled runs are compared with
_RECOMPILES = 3         # compiled runs that had to be compiled again before the run goes back to fused


def available():
    """Whether jax can be imported (without importing it: that costs a second, paid by the compile)."""
    import importlib.util
    return importlib.util.find_spec("jax") is not None


class XlaRun:
    """One Session run (fetches, feeds, targets) and its compiled XLA program, once there is one.

    state: "fused" (not compiling yet), "compiling", "trial", "compiled" (runs compiled), "slower" (its
    compiled runs were slower: fused for good), "refused" (the lowering cannot express it: `reason` says
    why), "failed" (the compile or a compiled run raised something unexpected: `reason`)."""

    def __init__(self, graph, fetches, feed_names, targets):
        self.graph, self.fetches, self.targets = graph, list(fetches), tuple(targets)
        self.feed_names = sorted(feed_names)
        self.state, self.reason = "fused", None
        self.fused_seconds, self.compile_seconds = 0.0, None
        self.fused_times, self.compiled_times = [], []
        self.fused_runs = 0
        self.compiled_runs = 0
        self.recompiled = 0         # compiled runs that ran again, compiled anew (a length that changed)
        self.program, self._thread = None, None
        self._digest = None         # the graph's hash, for the disk entry (disk.py)
        self.loaded = False         # the executable came from the disk cache
        self.replanned = False     # (the Session replanned a refused run for numba)

    # ------------------------------------------------------------------ one run
    def run(self, feeds, run_count):
        """The fetched values of a compiled run (the Session's run_count-th run: what it draws), or None: the
        caller runs it fused (and calls `fused`)."""
        flat = [feeds[n] for n in self.feed_names]
        if self.state == "fused" and self._digest is None:
            self._load(flat)
        if self.state not in ("trial", "compiled"):
            return None
        t, reruns = time.perf_counter(), self.program.reruns
        try:
            values = self.program.run(flat, run_count, compiled_only=True)
            if values is None:        # new input shapes or Variables: compile those too
                self._start(flat)
                return None
        except DfcError:
            return None          # the step runs fused, which raises the error with its usual message
        except Exception as e:  # noqa: BLE001 — any failure of XLA's leaves the run on the fused path
            self.state, self.reason = "failed", f"a compiled run raised {type(e).__name__}: {e}"
            return None
        self.compiled_runs += 1
        if self.program.reruns != reruns:
            self.recompiled += 1
            if self.recompiled >= _RECOMPILES:
                self.state = "refused"
                self.reason = (f"{self.recompiled} compiled runs had to be compiled again: a TensorArray's "
                               "stacked length (or a buffer) changes from run to run")
        # timed: not the first compiled run (a warm-up) nor one that ran again with larger buffers
        if self.state == "trial" and self.compiled_runs > 1 and self.program.reruns == reruns:
            self.compiled_times.append(time.perf_counter() - t)
            if len(self.compiled_times) >= TRIALS:
                slower = statistics.median(self.compiled_times) > statistics.median(self.fused_times[-_RECENT:])
                self.state = "slower" if slower else "compiled"
                if not slower:
                    self._save(flat)
        return values

    def fused(self, seconds, feeds):
        """Record a fused run of `seconds`; start the compile once the fused runs took long enough."""
        self.fused_seconds += seconds
        self.fused_runs += 1
        self.fused_times.append(seconds)
        del self.fused_times[:-_RECENT]
        if self.state == "fused" and self.fused_seconds >= START_SECONDS and self.fused_runs >= START_CALLS:
            self._start([feeds[n] for n in self.feed_names])

    # ------------------------------------------------------------------ the compile
    def _start(self, flat):
        if self._thread is not None and self._thread.is_alive():
            return
        self.state = "compiling"
        # not a daemon: a process that ends while XLA compiles waits for it (a daemon thread inside XLA's
        # compiler when the interpreter shuts down aborts the process)
        self._thread = threading.Thread(target=self._compile, args=(flat,), name="dfc-xla-compile")
        self._thread.start()

    def _compile(self, flat):
        from dfc.runtime.xla.jops import NotLowerable
        t = time.perf_counter()
        try:
            if self.program is None:
                from dfc.runtime.xla import to_jax
                self.program = to_jax(self.graph, self.fetches, self.feed_names, self.targets)
            self.program.compile(flat)
        except NotLowerable as e:
            self.state, self.reason = "refused", str(e)
            return
        except Exception as e:  # noqa: BLE001 — a compile that fails leaves the run fused, with the reason
            self.state, self.reason = "failed", f"compiling raised {type(e).__name__}: {e}"
            return
        self.compile_seconds = (self.compile_seconds or 0.0) + time.perf_counter() - t
        self.state = "compiled" if len(self.compiled_times) >= TRIALS else "trial"

    def _entry(self, flat):
        from dfc.runtime.xla import disk
        if self._digest is None:
            self._digest = disk.graph_digest(self.graph)
        return disk.entry(self._digest, self.fetches, self.feed_names, self.targets, flat)

    def _load(self, flat):
        """A run some process compiled and kept before: its executable from the disk cache, at once."""
        import os
        path = self._entry(flat)
        if path is None or not os.path.exists(path):
            return
        t = time.perf_counter()
        try:
            from dfc.runtime.xla import to_jax
            program = to_jax(self.graph, self.fetches, self.feed_names, self.targets)
            if not program.load(path, flat):
                return
        except Exception:  # noqa: BLE001 — an entry that does not load is compiled again, as if absent
            return
        self.program, self.loaded, self.state = program, True, "compiled"
        self.compile_seconds = time.perf_counter() - t

    def _save(self, flat):
        path = self._entry(flat)
        if path is not None and not self.loaded:
            try:
                self.program.save(path, flat)
            except Exception:  # noqa: BLE001 — a cache that cannot be written costs the next process a compile
                pass

    def wait(self, timeout=None):
        """Wait for a compile in progress (tests, benchmarks)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def describe(self):
        """What `Session.compiled_runs()` reports for this run."""
        med = (lambda xs: round(statistics.median(xs) * 1e3, 4) if xs else None)
        return {"state": self.state, "reason": self.reason, "compile_seconds": self.compile_seconds,
                "from_disk": self.loaded,
                "compiled_runs": self.compiled_runs, "fused_ms": med(self.fused_times),
                "compiled_ms": med(self.compiled_times)}


def explain(graph):
    """Whether the default mode can compile a run of `graph`'s signature with XLA, found by tracing it with
    the signature's input types (nothing is compiled or run): {"status": "lowers" | "refused" | "unknown",
    "reason"}. "unknown": jax is not installed, or an input's shape is not fully known before a run."""
    if not available():
        return {"status": "unknown", "reason": "jax is not installed (numba compiles the loop frames)"}
    inputs = graph.signature.get("inputs", [])
    if any(i.get("shape") is None or any(d is None for d in i["shape"]) for i in inputs):
        return {"status": "unknown", "reason": "an input's shape is known only when it runs; "
                                               "Session.compiled_runs() says after a run"}
    import jax
    import numpy as np
    from dfc.runtime.xla import to_jax
    from dfc.runtime.xla.jops import NotLowerable, NotStatic
    from dfc.runtime.xla.program import integer_scalars
    feeds = [jax.ShapeDtypeStruct(tuple(i["shape"]), np.dtype(i["dtype"])) for i in inputs]
    try:
        to_jax(graph).check(feeds)
    except NotStatic as e:
        scalars = [inputs[k]["name"] for k in integer_scalars(feeds)]
        if scalars:
            return {"status": "lowers", "reason": f"one executable per value of {', '.join(scalars)} ({e})"}
        return {"status": "refused", "reason": str(e)}
    except NotLowerable as e:
        return {"status": "refused", "reason": str(e)}
    return {"status": "lowers", "reason": None}
