"""Compiled loop frames: a fused loop frame whose ops all have a lowering runs as numba machine code.

`Session(graph, compile_loops=True)`: each loop frame the fused path can run (dfc/runtime/fused.py), with
its conds and nested loops, is turned into numba source by codegen.py from the lowerings beside the
kernels (dfc/runtime/kernels/*_lower.py) and compiled on its first call for the types of its Enter values.
It computes what the fused frame computes, bit for bit (lowerings call numpy's own loops where numba's
math differs; tests/conftest.py's mode matrix checks it against the reference interpreter).

A frame that cannot be compiled (an op without a lowering, a value of unknown rank, a resource handle)
stays on the fused Python path; `Session.compiled_frames()` and `dfc show --fused` name the node that
blocked it. At run time the fused path also runs the frame when an Enter value is dead or of another type
than the graph declares, inside a partition (which must be able to stop the loop), and after the compiled
code raises: compiled code has no side effects, so the fused path replays the frame from its Enter values
and raises the error naming the node (e.g. integer division by zero, a shape mismatch).

Compiled code is cached on disk (cache.py), so a second process loads machine code instead of compiling;
`stats()` reports each frame's compile (or cache load) time.

When to compile: compile_loops=True compiles every frame on its first run; compile_loops="auto" only a
frame worth it, one whose runs on the fused path have taken AUTO_SECONDS in all (a compile costs about
that), or whose machine code is in the disk cache already; its first TRIAL_RUNS compiled runs are then
timed against its fused runs, and a frame whose compiled code turns out slower (values that cross in and
out at a cost) goes back to the fused path for good. $DFC_COMPILE_BUDGET (seconds) caps the time
one process spends compiling (frames already in the disk cache do not count); past it, new frames stay
fused (the test suite sets it: every test runs its loops compiled, within a bounded time).
"""
import threading
import time

import numpy as np

from dfc import config
from dfc.runtime.compiled.resources import Resources, arg as _arg
from dfc.runtime.values import DEAD

_stats_lock = threading.Lock()
_STATS = []     # one dict per compile: frame, key, seconds, cached, types
AUTO_SECONDS = 0.5
TRIAL_RUNS = 12     # "auto": compiled runs timed against the fused ones before it keeps the compiled code
SLOWER = 1.2        # ... and how much slower (median per call) they may be (timing noise) before it does not
_budget = {"left": config.env("DFC_COMPILE_BUDGET")}


def stats():
    """One dict per frame compiled (or loaded from the disk cache) in this process: frame name, module
    key, seconds the first call spent compiling or loading, cached (True: loaded from disk), types."""
    with _stats_lock:
        return [dict(s) for s in _STATS]


def available():
    """Whether numba can be imported (it is a dependency; a broken install leaves frames fused)."""
    try:
        import numba  # noqa: F401
        return True
    except Exception:   # noqa: BLE001
        return False


class CompiledFrame:
    """Stands in for a fused FrameProgram in Plan.programs (same fid/enters/enter_pos/exits/fn)."""

    def __init__(self, prog, src, policy=True):
        self.prog, self.src, self.policy = prog, src, policy
        self.fused_seconds = 0.0      # time its runs on the fused path took (compile_loops="auto")
        self._fused_times = []        # "auto": the first fused runs' times, and the first compiled runs'
        self._compiled_times = []     # (whole calls: arguments and effects included), to compare them
        self.slower_compiled = False  # "auto": its compiled runs took longer than its fused runs: fused
        self._decided = False
        self._compiled_once = False
        self._job = None              # compile_loops="auto": the child process compiling it (background.py)
        self._job_recorded = False
        self._on_disk = None          # "auto": its machine code was in the disk cache at its first run
        self.superseded_by = None     # "auto": the whole run's CompiledFrame (compile_root), which has this
        #                               frame's code inside: this frame compiles only if that one fails
        self.fid, self.enters, self.enter_pos, self.exits = prog.fid, prog.enters, prog.enter_pos, prog.exits
        self.source = src.source
        self.name = prog.plan.frame_names[prog.fid]
        self.consts = tuple(src.consts)
        self._in = [(None, None) if t.dtype == "resource" else (np.dtype(t.dtype), t.ndim) for t in src.enter_types]
        self._res = Resources(src, self.name)
        self._out = [np.dtype(t.dtype).type for t in src.exit_types]
        self._run = None
        self._lp = None
        self._lock = threading.Lock()
        self.compile_seconds = {}     # argument type signature -> seconds (compile or cache load)
        self.runs = {"compiled": 0, "fused": 0}     # how its runs went (fused: not compiled yet, values
        #                                             it cannot take, or a replay to raise an error)

    def _function(self):
        if self._run is None:
            with self._lock:
                if self._run is None:
                    from dfc.runtime.compiled import cache, npcall
                    run, self.key = cache.load(self.source)
                    lp = []
                    for ufunc, dtypes, reduction in self.src.loops:
                        lp.extend(npcall.loop_address(ufunc, dtypes, reduction))
                    self._lp = np.array(lp or [0], np.int64)
                    self._run = run
        return self._run

    def traced_fn(self):
        """The function a Trace runs (trace.py): the fused path's traced build whenever the frame runs fused
        (its kernels show as spans), the compiled code (one span, no kernels) when it runs compiled."""
        return lambda ctx, kern, vals, tag: self.fn(ctx, kern, vals, tag, traced=True)

    def fn(self, ctx, kern, vals, tag, traced=False):
        """Run the frame: compiled when its Enter values fit, else (or to report an error) fused."""
        if self.policy == "auto" and self._compiled_once and not self._decided:
            if len(self._compiled_times) < TRIAL_RUNS:
                n, t0 = self.runs["compiled"], time.perf_counter()
                try:
                    return self._fn(ctx, kern, vals, tag, traced)
                finally:
                    if self.runs["compiled"] > n:
                        self._compiled_times.append(time.perf_counter() - t0)
            if len(self._fused_times) < 4:      # (compiled from its first run: from the disk cache)
                return self._fused_timed(ctx, kern, vals, tag, traced)
            self._decide()
        if self.slower_compiled:
            return self._fused(ctx, kern, vals, tag, traced)
        return self._fn(ctx, kern, vals, tag, traced)

    def _decide(self):
        """compile_loops="auto": its first compiled runs were timed against its fused runs; if the compiled
        code is the slower (a frame whose values cross in and out at a cost, say), the frame goes back to
        the fused path for good, so the default mode never makes a program slower than fused."""
        fused = float(np.median(self._fused_times[1:]))        # (the first run warms up)
        compiled = float(np.median(self._compiled_times[1:]))  # (the first one loads the machine code)
        self.slower_compiled = compiled > SLOWER * fused
        self._decided = True

    def _fn(self, ctx, kern, vals, tag, traced=False):
        if ctx.abort is not None:
            return self._fused(ctx, kern, vals, tag, traced)
        if not self._compiled_once and not self._worth_compiling():
            return self._fused_timed(ctx, kern, vals, tag, traced)
        if self.policy == "auto" and not self._compiled_once and self._job is not None and not self._job.poll():
            # a child is compiling it (or failed): fused, without building the compiled code's arguments
            # (stacks and TensorArrays as typed Lists cost as much as the fused run itself)
            return self._fused_timed(ctx, kern, vals, tag, traced)
        res_args = self._res.args(vals) if self._res.uses else {}
        if res_args is None:
            return self._fused(ctx, kern, vals, tag, traced)
        args = []
        for k, (v, (dtype, ndim)) in enumerate(zip(vals, self._in)):
            a = res_args[k] if k in res_args else _arg(v, dtype, ndim)
            if a is None:
                return self._fused(ctx, kern, vals, tag, traced)
            args.append(a)
        if self.policy == "auto" and not self._compiled_once and not self._compiled_elsewhere(args):
            return self._fused_timed(ctx, kern, vals, tag, traced)
        run = self._function()
        try:
            n_sigs = len(run.overloads)     # (not .signatures: it rebuilds a list of hashed types, ~28 us)
            t0 = time.perf_counter()
            outs = run(*args, self.consts, self._lp, np.array((ctx.run_count,) + tuple(tag), np.int64))
            if len(run.overloads) != n_sigs:
                self._record(run, time.perf_counter() - t0, args)
            self._compiled_once = True
            apply = self._res.effects(vals, res_args, tag) if res_args else None
        except Exception:   # noqa: BLE001 — the fused path replays the frame and names the failing node
            return self._fused(ctx, kern, vals, tag, traced)
        self.runs["compiled"] += 1
        if apply is not None:
            apply()         # the compiled code succeeded: its effects on stacks, TensorArrays, Variables
        n = len(self._out)
        res = []
        for k in range(n):
            if outs[n + k]:
                res.append(DEAD)
                continue
            x = outs[k]
            if isinstance(x, np.ndarray):
                if any(x is c for c in self.consts):
                    x = x.copy()
                res.append(x)
            else:
                res.append(self._out[k](x))
        return res

    def _fused(self, ctx, kern, vals, tag, traced=False):
        self.runs["fused"] += 1
        return (self.prog.traced_fn() if traced else self.prog.fn)(ctx, kern, vals, tag)

    def _fused_timed(self, ctx, kern, vals, tag, traced=False):
        t0 = time.perf_counter()
        try:
            return self._fused(ctx, kern, vals, tag, traced)
        finally:
            dt = time.perf_counter() - t0
            self.fused_seconds += dt
            if len(self._fused_times) < 4 * TRIAL_RUNS:
                self._fused_times.append(dt)

    def _worth_compiling(self):
        from dfc.runtime.compiled import cache
        if self.policy == "auto":
            whole = self.superseded_by
            if whole is not None and not (whole._job is not None and whole._job.poll() is False):
                return False
            if self._on_disk is None:     # looked up once (a directory listing: ms), not on every fused run
                self._on_disk = cache.on_disk(self.source)
            return self._job is not None or self._on_disk or self.fused_seconds >= AUTO_SECONDS
        if cache.is_cached(self.source):
            return True
        return _budget["left"] > 0

    def _compiled_elsewhere(self, args):
        """compile_loops="auto": whether machine code for these arguments can run without compiling in this
        process — in the disk cache, or just put there by a child process this frame started (background.py).
        Starts that child the first time; a child that failed keeps the frame fused."""
        from dfc.runtime.compiled import background, cache
        if self._job is None:
            if self._on_disk or cache.on_disk(self.source):     # again: another process may have compiled it
                return True
            import numba
            run = self._function()
            types = tuple(numba.typeof(a) for a in args) + (numba.typeof(self.consts), numba.typeof(self._lp),
                                                            numba.typeof(np.zeros(1, np.int64)))
            self._job = background.start(run.py_func.__code__.co_filename, types, self.name)
            return False
        if not self._job.poll():          # still compiling, or failed (the frame stays fused)
            return False
        if not self._job_recorded:
            self._job_recorded = True
            with _stats_lock:
                _STATS.append({"frame": self.name, "key": self.key, "seconds": self._job.seconds, "cached": False,
                               "types": "background", "background": True})
        return True

    def _record(self, run, seconds, args):
        cached = bool(sum(run.stats.cache_hits.values())) if hasattr(run, "stats") else False
        sig = ", ".join(f"{a.dtype}{list(a.shape) if isinstance(a, np.ndarray) else '[]'}" if hasattr(a, "dtype")
                        else "resource" for a in args)
        self.compile_seconds[sig] = seconds
        with _stats_lock:
            if not cached:
                _budget["left"] -= seconds
            _STATS.append({"frame": self.name, "key": self.key, "seconds": seconds, "cached": cached,
                           "types": sig})


def compile_programs(plan, programs, blocked=None, policy=True):
    """programs (fid -> fused FrameProgram) with every frame that can be compiled replaced by a
    CompiledFrame; `blocked` (a dict) gets fid -> codegen.Blocked for the others. policy: True (compile
    on the first run) or "auto" (once worth it; see the module docstring)."""
    if not programs or not available():
        return programs
    from dfc.errors import DfcError
    from dfc.runtime.compiled.codegen import Blocked, FrameSource
    from dfc.runtime.fused import FrameIndex
    from dfc.runtime.kernels import array_lower, math_lower, random_lower, state_lower  # noqa: F401 — register
    try:
        types = plan.graph.infer_types()
    except DfcError as e:
        if blocked is not None:
            for fid in programs:
                blocked[fid] = Blocked(None, f"the graph's types cannot be inferred: {e}")
        return programs
    index = FrameIndex(plan)
    out = dict(programs)
    for fid, prog in programs.items():
        try:
            out[fid] = CompiledFrame(prog, FrameSource(plan, fid, index, types), policy)
        except Blocked as b:
            if blocked is not None:
                blocked[fid] = b
    return out


def compile_root(plan, root, index, policy=True):
    """The CompiledFrame running fused_root.RootProgram `root` (the whole run: root frame and loops) as one
    numba function (root.py), or `root` itself when something in it cannot be compiled (plan.root_blocked
    says what)."""
    plan.root_blocked = None
    if not available():
        return root
    from dfc.errors import DfcError
    from dfc.runtime.compiled.codegen import Blocked
    from dfc.runtime.compiled import root as whole
    from dfc.runtime.compiled.root import RootSource
    from dfc.runtime.kernels import array_lower, math_lower, random_lower, state_lower  # noqa: F401 — register
    if not whole.ENABLED:
        plan.root_blocked = Blocked(None, "DFC_COMPILE_ROOT=0")
        return root
    try:
        cf = CompiledFrame(root, RootSource(plan, index, plan.graph.infer_types(), root), policy)
    except Blocked as b:
        plan.root_blocked = b
        return root
    except DfcError as e:
        plan.root_blocked = Blocked(None, f"the graph's types cannot be inferred: {e}")
        return root
    cf.name = "(root)"
    for c in root.analysis.child_programs:
        if isinstance(plan.programs.get(c), CompiledFrame):
            plan.programs[c].superseded_by = cf
    return cf


def explain_root(plan, ran_plans=()):
    """How a run of `plan` (built with fuse=True, compile_loops=False) goes as a whole: {"status": "compiled" (one numba function,
    root.py) | "fused" (the root frame's generated Python calling each loop frame) | "scheduled" (the
    tagged-frame scheduler runs the root), "blocked_by", "reason", "source", "compile_seconds"}."""
    from dfc.runtime.compiled.codegen import Blocked
    out = {"status": "scheduled", "blocked_by": None, "reason": None, "source": None, "compile_seconds": {}}
    rp = plan.root_program
    if rp is None:
        out["reason"] = getattr(plan, "root_reason", None) or "the run is not fused"
        return out
    from dfc.runtime.fused import FrameIndex
    compiled = compile_root(plan, rp, FrameIndex(plan)) if available() else rp
    if isinstance(compiled, CompiledFrame):
        out.update(status="compiled", source=compiled.source)
        for p in ran_plans:
            if isinstance(getattr(p, "root_program", None), CompiledFrame):
                out["compile_seconds"].update(p.root_program.compile_seconds)
        return out
    b = getattr(plan, "root_blocked", None) or Blocked(None, "numba is not available")
    out.update(status="fused", blocked_by=b.node, reason=str(b.reason), source=rp.source)
    return out


def explain(plan, ran_plans=()):
    """frame name -> {"status", "blocked_by", "reason", "source", "compile_seconds"} for every loop frame
    of `plan` (built with fuse=True): compiled, fused (with the node that blocked compiling) or not fused
    at all. `ran_plans`: Plans that have run, whose compiled frames report their compile times."""
    from dfc.runtime.fused import FrameIndex, build_programs
    reasons = {}
    progs = plan.programs or build_programs(plan, reasons)
    blocked = {}
    compiled = compile_programs(plan, progs, blocked) if available() else progs
    index = FrameIndex(plan)
    inside = set()          # frames nested in a fused frame run (and compile) with it
    for fid in progs:
        stack = list(index.children[fid])
        while stack:
            c = stack.pop()
            inside.add(c)
            stack.extend(index.children[c])
    times = {}
    for p in ran_plans:
        for prog in p.programs.values():
            if isinstance(prog, CompiledFrame):
                times.setdefault(prog.name, {}).update(prog.compile_seconds)
    out = {}
    for fid in range(1, len(plan.frame_names)):
        name = plan.frame_names[fid]
        if fid in compiled and isinstance(compiled[fid], CompiledFrame):
            out[name] = {"status": "compiled", "blocked_by": None, "reason": None,
                         "source": compiled[fid].source, "compile_seconds": times.get(name, {})}
        elif fid in progs:
            b = blocked.get(fid)
            reason = str(b.reason) if b is not None else "numba is not available"
            out[name] = {"status": "fused", "blocked_by": getattr(b, "node", None), "reason": reason,
                         "source": progs[fid].source, "compile_seconds": {}}
        elif fid in reasons:
            out[name] = {"status": "not fused", "blocked_by": None, "reason": reasons[fid], "source": None,
                         "compile_seconds": {}}
        if name in out and fid in inside:
            out[name]["nested"] = True
    return out
