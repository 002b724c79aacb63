"""Fuzzing the loader: mutated compiled graphs either run correctly or raise a DfcError.

Graphs compiled from small programs (loops, conds, TensorArrays, gradients through loops, stacks,
Variables, indexing) are saved as JSON, then mutated the way a damaged or hostile file would be:
fields dropped, duplicated, retyped and rewired, values nested deeply, numbers made huge, negative
or infinite. Loading and running the result (the reference interpreter and the threads executor
with fused loops, both with a memory limit, under a timeout guard) must either

- succeed, with every output of the dtype and shape the graph's signature declares, and the same
  values in both modes, or
- raise a DfcError (a DfcOutOfMemory or a timeout in one mode only is allowed: the modes hold
  memory differently and a mutated loop may never end),

and never raise anything else or hang. CI runs a few hundred examples (the same ones every time);
DFC_FUZZ_EXAMPLES=5000 runs more, with fresh random examples.
"""
import copy
import ctypes
import functools
import json
import os
import re
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dfc
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir import serialize, structure
from dfc.ir.graph import parse_input
from dfc.runtime import containers
from tests.ir.test_load_safety import loop_graph

LOCAL = int(os.environ.get("DFC_FUZZ_EXAMPLES", "0"))
EXAMPLES = LOCAL or 300
MEMORY_LIMIT = "64MB"
TIMEOUT_S = 2.0
MODES = {"reference": dict(mode="reference"), "fused": dict(mode="threads", fuse_loops=True)}
F32, F64, I64 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "int64")


# ------------------------------------------------------------------ seed graphs


def cond_in_loop():
    return loop_graph(), (np.float32(1.5), np.int64(3))     # the load-safety tests' loop with a cond


def scan_with_gradient():
    def f(xs):
        n = dfc.shape(xs)[0]
        ta = dfc.TensorArray("float32", size=n, dynamic_size=False).unstack(xs)

        def body(i, acc, out):
            acc = dfc.tanh(acc * 0.5 + ta.read(i))
            return i + 1, acc, out.write(i, acc)
        _, acc, out = dfc.while_loop(lambda i, acc, out: i < n, body, (0, dfc.zeros([2]), dfc.TensorArray("float32")))
        ys = out.stack()
        return ys, dfc.gradients(dfc.reduce_sum(ys * ys), [xs])[0]
    return dfc.trace(f, dfc.TensorSpec([None, 2], "float32")), (np.arange(6, dtype=np.float32).reshape(3, 2) / 6,)


def nested_loops_gradient():
    def f(x, n):
        def outer(i, s):
            return i + 1, dfc.while_loop(lambda j, t: j < i + 1, lambda j, t: (j + 1, dfc.sin(t) * x), (0, s))[1]
        y = dfc.while_loop(lambda i, s: i < n, outer, (0, x))[1]
        return y, dfc.gradients(y, [x])[0]
    return dfc.trace(f, F64, I64), (np.float64(0.7), np.int64(3))


def variables():
    w = dfc.Variable(np.zeros(3), name="fuzz_w")

    def f(x, n):
        body = lambda i, v: (i + 1, w.assign(v + x * dfc.cast(i, "float64")))    # noqa: E731
        return dfc.while_loop(lambda i, v: i < n, body, (0, w.read_value()))
    return dfc.trace(f, dfc.TensorSpec([3], "float64"), I64), (np.ones(3), np.int64(3))


def array_ops():
    def f(x, idx):
        y = dfc.reshape(x, [3, 4])
        z = dfc.concat([y, y * 2.0], axis=0)[1:5, ::2]
        m = dfc.matmul(dfc.one_hot(idx, 4, dtype="float32"), dfc.transpose(y))
        return dfc.softmax(z), dfc.reduce_max(dfc.gather(y, idx), axis=1), m[0, idx[0]], dfc.argmax(m, axis=1)
    return (dfc.trace(f, dfc.TensorSpec([12], "float32"), dfc.TensorSpec([2], "int32")),
            (np.arange(12, dtype=np.float32), np.array([0, 2], np.int32)))


def indexing_gradients():
    def f(x, idx):
        y = dfc.reduce_sum(x[idx] ** 2.0) + dfc.reduce_sum(dfc.gather(x, idx) * x[1:3]) + dfc.reduce_mean(x * x[0])
        return y, dfc.gradients(y, [x])[0]
    return dfc.trace(f, dfc.TensorSpec([None], "float64"), dfc.TensorSpec([2], "int64")), \
        (np.linspace(-1, 1, 5), np.array([3, 0], np.int64))


def effects_and_random():
    def f(x, n):
        def body(i, s):
            dfc.Assert(i < 100, [i], message="too many")
            return i + 1, s + dfc.random_uniform([2], seed=3) * x
        i, s = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([2])))
        dfc.print("s =", s)
        return dfc.cond(i > 2, lambda: s * 2.0, lambda: -s)
    return dfc.trace(f, F32, I64), (np.float32(0.5), np.int64(4))


def devices():
    def f(x, n):
        def body(i, s):
            with dfc.device("cpu:1"):
                s = dfc.tanh(s) + x
            return i + 1, s
        with dfc.device("cpu:2"):
            y = x * 2.0
        return dfc.while_loop(lambda i, s: i < n, body, (0, y))[1]
    return dfc.trace(f, F32, I64), (np.float32(0.5), np.int64(3))


@functools.lru_cache(maxsize=None)
def seeds():
    """(name, JSON text, arguments, {dtype: [refs of that dtype]}) of each seed graph."""
    out = []
    for make in (cond_in_loop, scan_with_gradient, nested_loops_gradient, variables, array_ops, indexing_gradients,
                 effects_and_random, devices):
        g, args = make()
        refs = {}
        for name, ts in g.infer_types().items():
            for port, t in enumerate(ts):
                refs.setdefault(t.dtype, []).append(f"{name}:{port}")
        out.append((make.__name__, serialize.to_json(g), args, refs))
    return out


# ------------------------------------------------------------------ mutations


NUMBERS = [0, 1, -1, 2, 7, -7, 2 ** 31, 2 ** 63 - 1, 2 ** 63, -2 ** 63, 2 ** 64, 10 ** 30, -10 ** 30,
           1e308, 0.5, -0.0, float("inf"), float("-inf"), float("nan")]
SCALARS = st.one_of(st.sampled_from(NUMBERS), st.booleans(), st.none(),
                    st.sampled_from(["", "x", "float32", "int64", "bool", "resource", "bogus", "x:0", "^x", ":",
                                     "a:b:c", "while", "Merge", "../x"]),
                    st.integers(-3, 3))
JSON = st.recursive(SCALARS, lambda sub: st.one_of(st.lists(sub, max_size=3),
                                                   st.dictionaries(st.sampled_from(["t", "ref", "x"]), sub,
                                                                   max_size=2)), max_leaves=5)
OPS = sorted(opreg.REGISTRY)


class Doc:
    """A graph document being mutated, plus text substitutions applied after json.dumps (deep nesting
    cannot go through json.dumps, which recurses)."""

    def __init__(self, text, refs):
        self.d = json.loads(text)
        self.refs = refs      # dtype -> refs of the seed graph: rewiring to these often still loads
        self.subs = []

    def text(self):
        t = json.dumps(self.d)
        for marker, repl in self.subs:
            t = t.replace(json.dumps(marker), repl)
        return t


def _slots(v):
    """Every (container, key) in a JSON value: the places a mutation can change."""
    out, stack = [], [v]
    while stack:
        c = stack.pop()
        keys = list(c) if isinstance(c, dict) else range(len(c)) if isinstance(c, list) else ()
        for k in keys:
            out.append((c, k))
            stack.append(c[k])
    return out


def _nodes(doc, data):
    return doc.d["nodes"] if isinstance(doc.d.get("nodes"), list) and doc.d["nodes"] else None


def _pick_node(doc, data):
    nodes = _nodes(doc, data)
    if not nodes:
        return None
    n = data.draw(st.sampled_from(nodes))
    return n if isinstance(n, dict) else None


def _ref(doc, data):
    nodes = [n for n in _nodes(doc, data) or [] if isinstance(n, dict) and isinstance(n.get("name"), str)]
    if not nodes:
        return "x"
    name = data.draw(st.sampled_from(nodes))["name"]
    return data.draw(st.sampled_from([name, f"{name}:0", f"{name}:1", f"{name}:2", f"^{name}"]))


def m_rewire(doc, data):
    n = _pick_node(doc, data)
    if n is not None and isinstance(n.get("inputs"), list):
        ref = _ref(doc, data)
        if n["inputs"] and data.draw(st.booleans()):
            n["inputs"][data.draw(st.integers(0, len(n["inputs"]) - 1))] = ref
        else:
            n["inputs"].append(ref)


def m_rewire_typed(doc, data):
    """Rewire an input to another tensor of the same dtype (in the seed): often a graph that still loads."""
    n = _pick_node(doc, data)
    if n is not None and isinstance(n.get("inputs"), list) and n["inputs"]:
        k = data.draw(st.integers(0, len(n["inputs"]) - 1))
        old = n["inputs"][k]
        if not isinstance(old, str) or old.startswith("^"):
            return
        same = [refs for refs in doc.refs.values() if any(parse_input(r)[:2] == parse_input(old)[:2]
                                                          for r in refs)]
        if same:
            n["inputs"][k] = data.draw(st.sampled_from(same[0]))


def m_const_value(doc, data):
    """A constant with another value of its dtype and shape: loop bounds, shapes, indices, steps."""
    consts = [n for n in _nodes(doc, data) or [] if isinstance(n, dict) and n.get("op") == "Const"]
    if consts:
        n = data.draw(st.sampled_from(consts))
        try:
            v = serialize.decode_tensor(n["attrs"]["value"])
        except (KeyError, TypeError, dfc.DfcError):
            return
        new = data.draw(st.sampled_from([0, 1, -1, 2, 3, 100, -100, 10 ** 4, 10 ** 6, 2 ** 31 - 1, 10 ** 12]))
        with np.errstate(all="ignore"):
            n["attrs"]["value"] = serialize.encode_tensor(np.full(v.shape, new).astype(v.dtype))


def m_drop(doc, data):
    slots = [(c, k) for c, k in _slots(doc.d)]
    c, k = data.draw(st.sampled_from(slots))
    del c[k]


def m_duplicate(doc, data):
    n = _pick_node(doc, data)
    if n is not None:
        m = copy.deepcopy(n)
        if data.draw(st.booleans()) and isinstance(m.get("name"), str):
            m["name"] += "_dup"
        doc.d["nodes"].append(m)


def m_retype(doc, data):
    dtypes = list(dt.ALL) + ["resource", "bogus", "float16", "complex64"]
    slots = [(c, k) for c, k in _slots(doc.d) if k in ("dtype", "elem_dtype")]
    if slots:
        c, k = data.draw(st.sampled_from(slots))
        c[k] = data.draw(st.sampled_from(dtypes))


def m_op(doc, data):
    n = _pick_node(doc, data)
    if n is not None:
        n["op"] = data.draw(st.sampled_from(OPS))


def m_number(doc, data):
    slots = [(c, k) for c, k in _slots(doc.d) if isinstance(c[k], (int, float)) and not isinstance(c[k], bool)]
    if slots:
        c, k = data.draw(st.sampled_from(slots))
        c[k] = data.draw(st.sampled_from(NUMBERS))


def m_value(doc, data):
    c, k = data.draw(st.sampled_from(_slots(doc.d)))
    c[k] = data.draw(JSON)


def m_nest(doc, data):
    c, k = data.draw(st.sampled_from(_slots(doc.d)))
    depth = data.draw(st.sampled_from([1, 2, 50, 300, 3000, 100000]))
    marker = f"@@nest{len(doc.subs)}@@"
    doc.subs.append((marker, "[" * depth + json.dumps(c[k]) + "]" * depth))
    c[k] = marker


def m_delete_node(doc, data):
    nodes = _nodes(doc, data)
    if nodes:
        del nodes[data.draw(st.integers(0, len(nodes) - 1))]


def m_flip(doc, data):
    slots = [(c, k) for c, k in _slots(doc.d) if isinstance(c[k], bool)]
    if slots:
        c, k = data.draw(st.sampled_from(slots))
        c[k] = not c[k]


def m_const(doc, data):
    consts = [n for n in _nodes(doc, data) or [] if isinstance(n, dict) and n.get("op") == "Const"]
    if consts:
        n = data.draw(st.sampled_from(consts))
        shape = data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 10 ** 6]), max_size=3))
        dtype = data.draw(st.sampled_from(list(dt.ALL)))
        value = np.full([min(s, 4) for s in shape], data.draw(st.sampled_from([0, 1, -1, 5, 10 ** 9])))
        enc = serialize.encode_tensor(value.astype(dtype))
        enc["shape"] = shape if data.draw(st.booleans()) else enc["shape"]
        n.setdefault("attrs", {})["value"] = enc


def m_frame(doc, data):
    enters = [n for n in _nodes(doc, data) or [] if isinstance(n, dict) and n.get("op") == "Enter"]
    if enters:
        n = data.draw(st.sampled_from(enters))
        names = sorted({e.get("attrs", {}).get("frame_name") for e in enters} - {None}, key=str) + ["other"]
        n.setdefault("attrs", {})["frame_name"] = data.draw(st.sampled_from(names))


# Repeated entries are drawn more often: mutations that often leave a graph that loads find run-time bugs.
MUTATIONS = [m_rewire, m_rewire_typed, m_rewire_typed, m_rewire_typed, m_const_value, m_const_value, m_const_value,
             m_drop, m_duplicate, m_retype, m_op, m_number, m_value, m_nest, m_delete_node, m_flip, m_flip, m_const,
             m_frame]


# ------------------------------------------------------------------ running under guard


class _Timeout(BaseException):
    """Raised inside a run that took too long (a mutated loop may never end)."""


TIMEOUT, HANG = "timeout", "hang"
INTERNAL = re.compile(r"failed: (NameError|UnboundLocalError|AttributeError|KeyError|AssertionError|RecursionError)")


def guarded(fn):
    """fn() in a thread: its value, or the exception it raised, or TIMEOUT; HANG if it cannot be stopped."""
    box = {}

    def work():
        try:
            box["value"] = fn()
        except BaseException as e:   # noqa: BLE001 — reported to the test
            box["error"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(TIMEOUT_S)
    if t.is_alive():
        for _ in range(100):     # again and again: a finalizer or gc callback may swallow one
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Timeout))
            t.join(0.2)
            if not t.is_alive():
                return TIMEOUT
        return HANG
    if "error" in box:
        if isinstance(box["error"], _Timeout):
            return TIMEOUT
        return box["error"]
    return box["value"]


def _inputs(g, seed_args):
    """The seed's arguments where they fit the (maybe mutated) signature, else ones of the declared type."""
    args = []
    for k, spec in enumerate(g.signature.get("inputs", [])):
        shape = [2 if d is None else d for d in (spec.get("shape") or [])]
        a = seed_args[k] if k < len(seed_args) else None
        if a is None or np.asarray(a).dtype.name != spec["dtype"] or \
                not dt.shapes_compatible(np.shape(a), spec.get("shape") and tuple(spec["shape"])):
            a = np.ones(shape if np.prod(shape) < 1000 else [0] * len(shape), spec["dtype"])
        args.append(a)
    return args


def run_mode(g, mode, args, tmp):
    if f"fuzz_{mode}" in containers.names():
        containers.reset(f"fuzz_{mode}")      # each run starts from the Variables' initial values
    s = dfc.Session(g, memory_limit=MEMORY_LIMIT, container=f"fuzz_{mode}", printer=lambda text: None,
                    checkpoint_dir=str(tmp), **MODES[mode])
    return s.call_flat(*args)


def check(text, seed_args, tmp):
    """Load and run one document; return a short description of what happened (for statistics)."""
    try:
        g = dfc.loads(text)
    except dfc.DfcError as e:
        return f"rejected at load: {type(e).__name__}"
    args = _inputs(g, seed_args)
    results = {m: guarded(lambda m=m: run_mode(g, m, args, tmp)) for m in MODES}
    for m, r in results.items():
        assert r is not HANG, f"{m}: the run could not be stopped (a hang)"
        if isinstance(r, BaseException) and not isinstance(r, dfc.DfcError):
            raise AssertionError(f"{m}: {type(r).__name__} escaped instead of a DfcError: {r}") from r
        if isinstance(r, dfc.DfcError):
            # A verified graph cannot get stuck, and a kernel never fails on a Python slip inside dfc.
            assert not isinstance(r, dfc.DfcDeadlockError), f"{m}: a loaded graph deadlocked: {r}"
            assert not INTERNAL.search(str(r)), f"{m}: an internal error surfaced as a kernel failure: {r}"
        if isinstance(r, list):
            _check_declared(g, r, m)
    ok = {m: r for m, r in results.items() if isinstance(r, list)}
    failed = {m: r for m, r in results.items() if m not in ok}
    if len(ok) == 2:
        a, b = ok["reference"], ok["fused"]
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y, err_msg="reference and fused results differ")
        return "ran"
    for m, r in failed.items():
        if ok:
            assert r == TIMEOUT or isinstance(r, dfc.DfcOutOfMemory), \
                f"{m} raised {type(r).__name__}: {r} but {set(ok)} succeeded"
    return "error at run time: " + "/".join(sorted({r if isinstance(r, str) else type(r).__name__
                                                     for r in failed.values()}))


def _check_declared(g, values, mode):
    types = g.infer_types()
    refs = [leaf["ref"] for leaf in structure.leaves(g.signature.get("outputs"))]
    assert len(values) == len(refs)
    for ref, v in zip(refs, values):
        name, port, _ = parse_input(ref)
        t = types[name][port]
        assert isinstance(v, np.ndarray), f"{mode}: output {ref} is a {type(v).__name__}"
        assert v.dtype.name == t.dtype and dt.shapes_compatible(v.shape, t.shape), \
            f"{mode}: output {ref} is {v.dtype}{list(v.shape)}, declared {t!r}"


STATS = {}


@st.composite
def mutated(draw):
    name, text, args, refs = draw(st.sampled_from(seeds()))
    doc = Doc(text, refs)
    data = _Draw(draw)
    for _ in range(draw(st.integers(1, 3))):
        try:
            draw(st.sampled_from(MUTATIONS))(doc, data)
        except (AttributeError, TypeError, KeyError, IndexError):
            pass      # an earlier mutation left no place for this one (e.g. "attrs" is now a number)
    return name, doc.text(), args


class _Draw:
    def __init__(self, draw):
        self.draw = draw


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LOCAL, suppress_health_check=list(HealthCheck),
          **({} if LOCAL else {"database": None}))
@given(mutated())
def test_mutated_graphs_run_correctly_or_raise_a_dfc_error(tmp_path_factory, example):
    name, text, args = example
    outcome = check(text, args, tmp_path_factory.getbasetemp())
    STATS[(name, outcome)] = STATS.get((name, outcome), 0) + 1


def test_unmutated_seeds_run_and_agree(tmp_path):
    for name, text, args, _ in seeds():
        assert check(text, args, tmp_path) == "ran", name


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if LOCAL and STATS:
        total = sum(STATS.values())
        print(f"\nfuzzed {total} mutated graphs:")
        for (name, outcome), k in sorted(STATS.items()):
            print(f"  {name:24s} {outcome:50s} {k}")
