"""XlaProgram: a graph's signature run as one jax.jit-compiled function (see lower.py for the lowering)."""
import pickle

import numpy as np

import jax

from dfc.errors import DfcRuntimeError
from dfc.ir import structure
from dfc.runtime import containers
from dfc.runtime.executor import Plan
from dfc.runtime.fused import FrameIndex
from dfc.runtime.session import convert_input
from dfc.runtime.xla.lower import Analysis, Lowerer
from dfc.runtime.xla.state import var_key

# 64-bit types for dfc's own traces and runs, in the calling thread only (jax.enable_x64 since jax 0.7;
# jax.experimental.enable_x64 before)
_X64 = getattr(jax, "enable_x64", None)
if _X64 is None:
    from jax.experimental import enable_x64 as _X64


def x64():
    return _X64(True)

# Rows a stack or TensorArray buffer starts with: as many as fit in STACK_BYTES, between MIN_ROWS and
# MAX_ROWS (a power of two). Every run zeroes its buffers, so they stay small; a loop that outruns one
# costs a re-run and a compile, after which the buffer has the next power of two above what it needed.
MIN_ROWS, MAX_ROWS, STACK_BYTES = 64, 4096, 64 << 10


def initial_rows(shape, dtype):
    row = max(1, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    fit = max(1, STACK_BYTES // row)
    return int(min(MAX_ROWS, max(MIN_ROWS, 1 << (fit.bit_length() - 1))))


class XlaProgram:
    """`program(*inputs)` runs the graph's signature like `Session(graph).call(*inputs)`.

    One compiled function per (input shapes and dtypes, Variables present, stack capacities). When a loop
    pushes more than a stack's capacity, the run is repeated with the capacity raised to the next power of
    two above the high-water mark (`reruns` counts them); later calls keep the larger capacities.
    `compile(feeds)` compiles ahead of a run (a Session's background thread does, dfc/runtime/xla/auto.py);
    `ready(feeds)` says whether a run with these feeds would find its executable compiled.

    Random draws depend on the run count (philox.py): a Session passes its own to `run`; called on its own,
    the program counts its calls as a Session counts runs, so its n-th call draws what a Session's n-th
    run draws. The count is an input of the executable, not a constant in it.
    """

    def __init__(self, graph, fetches=None, feed_names=None, targets=()):
        """The graph's signature, or (a Session's run) these fetch refs, fed node names and targets."""
        sig = graph.signature
        self.graph, self.inputs = graph, sig.get("inputs", [])
        self.outputs = sig.get("outputs")
        if fetches is None:
            fetches = [leaf["ref"] for leaf in structure.leaves(self.outputs)]
            feed_names, targets = [s["node"] for s in self.inputs], tuple(sig.get("targets", []))
        self.feed_names = list(feed_names)
        self.plan = p = Plan(graph, list(fetches), self.feed_names, tuple(targets))
        self.analysis = Analysis(p, FrameIndex(p))
        self.types = graph.infer_types()
        self.caps = {}            # stack / TensorArray node -> rows of its buffer (set once its rows are known)
        self._buffers = [i for i, n in enumerate(p.nodes) if n.op in ("StackV2", "TensorArray", "TensorArrayGrad")]
        self.ta_lengths = {}      # TensorArrayStack node -> the length the last run stacked
        self.variables = {var_key(n): n for n in p.nodes if n.op == "VarHandle"}
        self.reruns = 0
        self._avals, self._fns, self._compiled = {}, {}, {}
        self.run_count = 0        # calls of `program(*inputs)` so far (a Session's first run is run 1)

    # ------------------------------------------------------------------ tracing
    def _trace(self, caps, avals, discover, ta_lengths, feeds, variables, run_count):
        low = Lowerer(self.plan, self.analysis, self.types, dict(caps), avals, discover, dict(ta_lengths))
        low.feed_names = self.feed_names
        outs, lives, state = low.run(feeds, variables, run_count)
        highs = {k: v[2] if k[0] == "s" else v[3] for k, v in state.items() if k[0] in "st" and k[1:].isdigit()}
        new_vars = {k: v for k, v in state.items() if k.startswith("v:")}
        errors = {"under": state["under"], "ta_error": state["ta_error"]}
        return outs, lives, new_vars, errors, highs, state["stacked"]

    def _function(self, feeds, variables):
        sig = self._key(feeds, variables)[0]
        avals = self._avals.get(sig)
        if avals is None:        # the abstract pass: what each stack holds
            avals = {}
            jax.eval_shape(lambda f, v: self._trace((), avals, True, (), f, v, np.int64(0)), feeds, variables)
            self._avals[sig] = avals
            for i in self._buffers:
                if i not in self.caps:
                    self.caps[i] = initial_rows(*avals[i]) if avals.get(i) is not None else MIN_ROWS
        caps, lengths = tuple(sorted(self.caps.items())), tuple(sorted(self.ta_lengths.items()))
        key = (sig, caps, lengths)
        fn = self._compiled.get(key) or self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = jax.jit(lambda f, v, r: self._trace(caps, avals, False, lengths, f, v, r))
        return fn

    def _key(self, feeds, variables):
        sig = (tuple((f.shape, f.dtype.str) for f in feeds), tuple(sorted((k, v.shape, v.dtype.str)
                                                                          for k, v in variables.items())))
        return sig, (sig, tuple(sorted(self.caps.items())), tuple(sorted(self.ta_lengths.items())))

    def ready(self, feeds):
        """Whether a run with these feeds (and the Variables as they are) has its executable compiled."""
        sig, key = self._key(feeds, self._variables())
        return sig in self._avals and key in self._compiled

    def compile(self, feeds, variables=None):
        """Trace and compile for these feeds (and the Variables' current values) ahead of the first run;
        the executable serves every later run with the same types and buffer sizes."""
        variables = self._variables() if variables is None else variables
        with x64():
            fn = self._function(feeds, variables)
            if isinstance(fn, jax.stages.Compiled):
                return
            key = next(k for k, f in self._fns.items() if f is fn)
            self._compiled[key] = fn.lower(feeds, variables, np.int64(0)).compile()

    def save(self, path, feeds):
        """Write the executable of these feeds, with what the program learned, to `path` (disk.py)."""
        from jax.experimental import serialize_executable
        sig, key = self._key(feeds, self._variables())
        compiled = self._compiled.get(key)
        if compiled is None:
            return False
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        from dfc.runtime.xla import disk
        disk.write(path, pickle.dumps(dict(payload=payload, in_tree=in_tree, out_tree=out_tree, sig=sig,
                                           avals=self._avals[sig], caps=self.caps, ta_lengths=self.ta_lengths)))
        return True

    def load(self, path, feeds):
        """Take the executable of these feeds from `path` (written by `save`); False if it holds another
        signature (Variables of other shapes) or cannot be loaded."""
        from jax.experimental import serialize_executable
        with open(path, "rb") as f:
            d = pickle.load(f)
        sig = self._key(feeds, self._variables())[0]
        if d["sig"] != sig:
            return False
        with x64():
            compiled = serialize_executable.deserialize_and_load(d["payload"], d["in_tree"], d["out_tree"])
        self._avals[sig], self.caps, self.ta_lengths = d["avals"], dict(d["caps"]), dict(d["ta_lengths"])
        self._compiled[self._key(feeds, self._variables())[1]] = compiled
        return True

    # ------------------------------------------------------------------ calling
    def feeds(self, *args):
        if len(args) != len(self.inputs):
            raise DfcRuntimeError(f"{len(self.inputs)} inputs expected, got {len(args)}")
        return [convert_input(a, s["dtype"], s.get("shape"), s["name"]) for a, s in zip(args, self.inputs)]

    def _variables(self):
        out = {}
        for key, n in self.variables.items():
            r = containers.get(n.attrs.get("container", "")).lookup(n.attrs["shared_name"])
            if isinstance(r, containers.VariableResource):
                out[key] = r.read()
        return out

    def __call__(self, *args):
        feeds = self.feeds(*args)
        self.run_count += 1
        return structure.pack(self.outputs, self.run(feeds, self.run_count))

    def run(self, feeds, run_count):
        """The fetched values (numpy arrays, in order) of one run on converted feeds (in feed_names' order),
        the `run_count`-th run of its Session (the draws' counter)."""
        with x64():
            return self._run(feeds, np.int64(run_count))

    def _run(self, feeds, run_count):
        variables = self._variables()
        while True:     # a re-run with larger buffers is the same run: the same run count, the same draws
            # one transfer of everything back (each value fetched on its own costs a sync of its own)
            outs, lives, new_vars, errors, highs, stacked = jax.device_get(
                self._function(feeds, variables)(feeds, variables, run_count))
            over = {int(k[1:]): int(h) for k, h in highs.items() if h > self.caps[int(k[1:])]}
            for s, h in over.items():
                self.caps[s] = 1 << (h - 1).bit_length()
            wrong = {i: int(length) for i, (n, length) in stacked.items() if int(n) != int(length)}
            self.ta_lengths.update(wrong)       # (only lengths other than the trace assumed: a key per function)
            if not over and not wrong:
                break
            self.reruns += 1
        if bool(errors["under"]):
            raise DfcRuntimeError("pop from an empty stack")
        if bool(errors["ta_error"]):
            raise DfcRuntimeError("TensorArray index out of range, written twice, or read before it was written")
        for (i, _), lv in zip(self.plan.fetches, lives):
            if not bool(lv):
                raise DfcRuntimeError("fetched value is dead (it comes from a branch that was not taken)",
                                      node=self.plan.nodes[i].name)
        for key, v in new_vars.items():      # Variables out: the container holds what the run assigned
            n = self.variables[key]
            value = np.asarray(v)
            r = containers.get(n.attrs.get("container", "")).variable(n.attrs["shared_name"], lambda: value,
                                                                     node=n.name)
            r.assign(value)
        return [np.asarray(o) for o in outs]
