"""XlaProgram: a graph's signature run as one jax.jit-compiled function (see lower.py for the lowering)."""
import pickle

import numpy as np

import jax
import jax.numpy as jnp

from dfc.errors import DfcRuntimeError
from dfc.ir import structure
from dfc.runtime import containers
from dfc.runtime.executor import Plan
from dfc.runtime.fused import FrameIndex
from dfc.runtime.session import convert_input
from dfc.runtime.xla import checks
from dfc.runtime.xla.jops import NotStatic
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


def integer_scalars(feeds):
    """Indices of the feeds (arrays or jax.ShapeDtypeStructs) that are integer or boolean scalars: the ones a
    shape may be computed from, which XlaProgram.static_retry makes constants of the executable."""
    return tuple(i for i, f in enumerate(feeds) if len(f.shape) == 0 and np.dtype(f.dtype).kind in "biu")


def pack_flags(tree, layout):
    """(one int64 vector of `tree`'s scalar integer and boolean leaves, its other leaves); `layout` is filled
    with what unpack_flags needs. Each array brought back from XLA costs tens of microseconds, and a run
    has a liveness flag per fetch, error flags, a high-water mark per buffer."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    leaves = [jnp.asarray(v) for v in leaves]
    packed = [i for i, v in enumerate(leaves)
              if v.ndim == 0 and (v.dtype == jnp.bool_ or jnp.issubdtype(v.dtype, jnp.integer))]
    layout.update(treedef=treedef, n=len(leaves), packed=packed, dtypes=[np.dtype(leaves[i].dtype) for i in packed])
    vec = jnp.stack([leaves[i].astype(jnp.int64) for i in packed]) if packed else jnp.zeros((0,), jnp.int64)
    keep = set(packed)
    return vec, [v for i, v in enumerate(leaves) if i not in keep]


def unpack_flags(vec, rest, layout):
    leaves, others = [None] * layout["n"], iter(rest)
    for j, (i, dtype) in enumerate(zip(layout["packed"], layout["dtypes"])):
        leaves[i] = vec[j].astype(dtype)
    leaves = [next(others) if v is None else v for v in leaves]
    return jax.tree_util.tree_unflatten(layout["treedef"], leaves)


class XlaProgram:
    """`program(*inputs)` runs the graph's signature like `Session(graph).call(*inputs)`.

    One compiled function per (input shapes and dtypes, Variables present, stack capacities). When a loop
    pushes more than a stack's capacity, the run is repeated with the capacity raised to the next power of
    two above the high-water mark (`reruns` counts them); later calls keep the larger capacities.
    `compile(feeds)` compiles ahead of a run (a Session's background thread does, dfc/runtime/xla/auto.py);
    `run(feeds, run_count, compiled_only=True)` runs only if that executable exists.

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
        self._layouts = {}        # function key -> how its scalar flags are packed (pack_flags)
        self.run_count = 0        # calls of `program(*inputs)` so far (a Session's first run is run 1)
        # feeds (their indices) whose values are constants of the executable: integer scalars a shape or a
        # length is computed from (a sample count, a maximum length), as jax.jit's static arguments
        self.static_feeds = ()

    # ------------------------------------------------------------------ tracing
    def _trace(self, caps, avals, discover, ta_lengths, feeds, variables, run_count, layout=None, statics=None):
        if statics:
            feeds = [statics.get(i, f) for i, f in enumerate(feeds)]
        low = Lowerer(self.plan, self.analysis, self.types, dict(caps), avals, discover, dict(ta_lengths))
        low.feed_names = self.feed_names
        outs, lives, state = low.run(feeds, variables, run_count)
        highs = {k: v[2] if k[0] == "s" else v[3] for k, v in state.items() if k[0] in "st" and k[1:].isdigit()}
        new_vars = {k: v for k, v in state.items() if k.startswith("v:")}
        errors = checks.results(state)
        small = (lives, errors, highs, state["stacked"])
        if layout is None:
            return outs, new_vars, small
        return (outs, new_vars) + pack_flags(small, layout)

    def _function(self, feeds, variables):
        """(the jitted or compiled function of these feeds and Variables, its flag layout, its key)."""
        sig = self._key(feeds, variables)[0]
        statics = {i: np.asarray(feeds[i]) for i in self.static_feeds}
        avals = self._avals.get(sig)
        if avals is None:        # the abstract pass: what each stack holds
            avals = {}
            jax.eval_shape(lambda f, v: self._trace((), avals, True, (), f, v, np.int64(0), statics=statics),
                           feeds, variables)
            self._avals[sig] = avals
            for i in self._buffers:
                if i not in self.caps:
                    self.caps[i] = initial_rows(*avals[i]) if avals.get(i) is not None else MIN_ROWS
        key = self._fn_key(sig)
        fn = self._compiled.get(key) or self._fns.get(key)
        if fn is None:
            _, caps, lengths = key
            layout = self._layouts[key] = {}
            fn = self._fns[key] = jax.jit(lambda f, v, r: self._trace(caps, avals, False, lengths, f, v, r, layout,
                                                                      statics))
        return fn, self._layouts[key], key

    def _key(self, feeds, variables):
        """(the signature of these feeds and Variables, the key of their function at today's buffer sizes)."""
        sig = (tuple((f.shape, f.dtype.str) for f in feeds), tuple(sorted((k, v.shape, v.dtype.str)
                                                                          for k, v in variables.items())),
               tuple(feeds[i].item() for i in self.static_feeds))
        return sig, self._fn_key(sig)

    def _fn_key(self, sig):
        return sig, tuple(sorted(self.caps.items())), tuple(sorted(self.ta_lengths.items()))

    def check(self, feeds):
        """Trace for these feeds (arrays or jax.ShapeDtypeStructs) without compiling: NotLowerable names
        what the lowering cannot express."""
        variables = self._variables()
        with x64():
            fn = self._function(feeds, variables)[0]
            if not isinstance(fn, jax.stages.Compiled):
                jax.eval_shape(fn, feeds, variables, np.int64(0))

    def static_retry(self, feeds, attempt):
        """attempt(), or, when it needs a value computed from the run's inputs when compiling (NotStatic),
        attempt() again with the integer scalar feeds as constants of the executable."""
        try:
            return attempt()
        except NotStatic:
            scalars = integer_scalars(feeds)
            if self.static_feeds or not scalars:
                raise
            self.static_feeds = scalars
            try:
                return attempt()
            except NotStatic:
                self.static_feeds = ()
                raise

    def compile(self, feeds, variables=None):
        """Trace and compile for these feeds (and the Variables' current values) ahead of the first run;
        the executable serves every later run with the same types and buffer sizes."""
        self.static_retry(feeds, lambda: self._compile(feeds, variables))

    def _compile(self, feeds, variables=None):
        variables = self._variables() if variables is None else variables
        with x64():
            fn, _, key = self._function(feeds, variables)
            if key in self._compiled:
                return
            # one run (its results dropped: a run has no effects until _run applies them) traces and
            # compiles into jit's own cache, whose dispatch is faster per call than an AOT executable's
            jax.block_until_ready(fn(feeds, variables, np.int64(0)))
            self._compiled[key] = fn

    def save(self, path, feeds):
        """Write the executable of these feeds, with what the program learned, to `path` (disk.py)."""
        from jax.experimental import serialize_executable
        sig, key = self._key(feeds, self._variables())
        compiled = self._compiled.get(key)
        if compiled is None:
            return False
        if not isinstance(compiled, jax.stages.Compiled):       # (from jit's cache: no second compile)
            with x64():
                compiled = compiled.lower(feeds, self._variables(), np.int64(0)).compile()
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        from dfc.runtime.compiled.cache import replace_file
        replace_file(path, pickle.dumps(dict(payload=payload, in_tree=in_tree, out_tree=out_tree, sig=sig,
                                             avals=self._avals[sig], caps=self.caps, ta_lengths=self.ta_lengths,
                                             layout=self._layouts[key], static_feeds=self.static_feeds)))
        return True

    def load(self, path, feeds):
        """Take the executable of these feeds from `path` (written by `save`); False if it holds another
        signature (Variables of other shapes) or cannot be loaded."""
        from jax.experimental import serialize_executable
        with open(path, "rb") as f:
            d = pickle.load(f)
        self.static_feeds = tuple(d["static_feeds"])
        sig = self._key(feeds, self._variables())[0]
        if d["sig"] != sig:
            return False
        with x64():
            compiled = serialize_executable.deserialize_and_load(d["payload"], d["in_tree"], d["out_tree"])
        self._avals[sig], self.caps, self.ta_lengths = d["avals"], dict(d["caps"]), dict(d["ta_lengths"])
        key = self._fn_key(sig)
        self._compiled[key], self._layouts[key] = compiled, d["layout"]
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

    def run(self, feeds, run_count, compiled_only=False):
        """The fetched values (numpy arrays, in order) of one run on converted feeds (in feed_names' order),
        the `run_count`-th run of its Session (the draws' counter); compiled_only: None instead of compiling
        when no executable has been compiled for these feeds."""
        with x64():
            return self.static_retry(feeds, lambda: self._run(feeds, np.int64(run_count), compiled_only))

    def _run(self, feeds, run_count, compiled_only=False):
        variables = self._variables()
        if compiled_only:
            sig, key = self._key(feeds, variables)
            if sig not in self._avals or key not in self._compiled:
                return None
        while True:     # a re-run with larger buffers is the same run: the same run count, the same draws
            fn, layout, key = self._function(feeds, variables)
            # each array to numpy by itself: jax.device_get's tree walk and asynchronous copies cost
            # about 100 us a run more, on a run of tens of microseconds
            result = fn(feeds, variables, run_count)
            self._compiled.setdefault(key, fn)      # (compiled by this call if it was new)
            leaves, tree = jax.tree_util.tree_flatten(result)
            outs, new_vars, flags, rest = jax.tree_util.tree_unflatten(tree, [np.asarray(v) for v in leaves])
            lives, errors, highs, stacked = unpack_flags(flags, rest, layout)
            over = {int(k[1:]): int(h) for k, h in highs.items() if h > self.caps[int(k[1:])]}
            for s, h in over.items():
                self.caps[s] = 1 << (h - 1).bit_length()
            wrong = {i: int(length) for i, (n, length) in stacked.items() if int(n) != int(length)}
            self.ta_lengths.update(wrong)       # (only lengths other than the trace assumed: a key per function)
            if not over and not wrong:
                break
            self.reruns += 1
        checks.raise_first(self.plan, errors)
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
