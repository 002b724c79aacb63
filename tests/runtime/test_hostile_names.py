"""Names from a graph never become code: the loader refuses hostile names, and a graph built in Python with
them (no loader) runs on every path with none of their text in any generated source.

The exploit this guards against: a loop node named "m\\n            <statement>\\n            #" ran the
statement when the fused-loop generator wrote the name into a comment of the Python it executes."""
import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dfc
from dfc.errors import DfcGraphError
from dfc.ir import serialize
from dfc.ir.graph import Graph, Node, parse_input
from dfc.runtime import emit, gpu_fusion
from tests.conftest import run_all_modes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F64 = "float64"


def _program(x, n):
    def body(i, s):
        t = dfc.tanh(s) * 0.5 + x                                   # an elementwise chain (one GPU kernel)
        u = dfc.while_loop(lambda j, v: j < 2, lambda j, v: (j + 1, v + t), (np.int64(0), t))[1]
        s = dfc.cond(i % 2 == 0, lambda: u * 2.0, lambda: u - 1.0)
        return i + 1, s
    return dfc.while_loop(lambda i, s: i < n, body, (np.int64(0), x * 1.0))[1]


def _graph():
    return dfc.trace(_program, dfc.TensorSpec([3], F64), dfc.TensorSpec([], "int64"))


ARGS = (np.array([0.5, -1.0, 2.0]), np.int64(3))


def _payloads(marker):
    run = f"open({str(marker)!r}, 'w').close()"
    out = ["\n" + " " * k + run + "\n" + " " * k + "#" for k in (0, 4, 8, 12, 16)]
    out += ["\n" + " " * 12 + "import os; os.system('touch " + str(marker) + "')\n" + " " * 12 + "#"]
    out += ["'", '"', "'''", '"""', "\\", "\\n", "\x00", "\u2028", "\u2029", "\x85", "\r", "\x0c", "#x",
            "{0}", "%s", "é ö", ") or (", "\\\n"]
    return out


def _renamed(g, names, frames):
    """A copy of g with node names names(k, name) and loop frame names frames(name), built without the
    loader (as a Python caller could)."""
    new = {name: names(k, name) for k, name in enumerate(g.nodes)}

    def ref(r):
        name, port, ctrl = parse_input(r)
        return "^" + new[name] if ctrl else f"{new[name]}:{port}"

    h = Graph("hostile")
    for n in g.nodes.values():
        attrs = dict(n.attrs)
        if "frame_name" in attrs:
            attrs["frame_name"] = frames(attrs["frame_name"])
        h.add_node(Node(new[n.name], n.op, [ref(r) for r in n.inputs], attrs, n.device, n.loc, n.var))

    def sig(v):
        if isinstance(v, dict):
            return {k: (ref(x) if k == "ref" else new[x] if k == "node" else sig(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [sig(x) for x in v]
        return v
    h.signature = sig(copy.deepcopy(g.signature))
    h.signature["targets"] = [new[t] for t in g.signature.get("targets", [])]
    return h


def _sources(session):
    """Every generated source of a session's graph: fused frames, compiled frames, the run as a whole."""
    out = [s for s in session.fused_frames().values()]
    out += [f["source"] for f in session.compiled_frames().values() if f["source"]]
    run = session.compiled_run()["source"]
    return out + ([run] if run else [])


def _clean(src, names, marker):
    assert str(marker) not in src and "open(" not in src and "system" not in src
    assert all(c == "\n" or " " <= c <= "~" for c in src), "generated source holds a control or non-ASCII char"
    for name in names:
        assert name not in src


@pytest.mark.timeout(300)
def test_hostile_names_built_in_python_run_on_every_path_and_never_reach_source(tmp_path, monkeypatch):
    marker = tmp_path / "PWNED"
    pay = _payloads(marker)
    g = _graph()
    want = dfc.Session(g, mode="reference").call(*ARGS)
    names = lambda k, name: f"n{k}" + ("a" * 1_000_000 if k == 7 else pay[k % len(pay)])   # noqa: E731
    frames = lambda f: "f" + f + pay[len(f) % len(pay)]                                    # noqa: E731
    h = _renamed(g, names, frames)
    seen = []
    real_run, real_check = emit.run, emit.check_module
    monkeypatch.setattr(emit, "run", lambda src, env, what: (seen.append(src), real_run(src, env, what))[1])
    monkeypatch.setattr(emit, "check_module", lambda lines: seen.append(real_check(lines)) or seen[-1])
    got = run_all_modes(h, *ARGS)
    np.testing.assert_array_equal(got, want)
    s = dfc.Session(h, fuse_loops=True, compile_loops=True, num_threads=0)
    np.testing.assert_array_equal(s.call(*ARGS), want)
    srcs = _sources(s) + seen
    assert any("while True:" in x for x in srcs) and any("@njit" in x for x in srcs) or not s.compiled_frames()
    for src in srcs:
        _clean(src, [n for n in h.nodes if len(n) < 1000], marker)
    assert not marker.exists()


@pytest.mark.timeout(120)
def test_hostile_names_in_gpu_chains_on_the_strict_double(tmp_path):
    marker = tmp_path / "PWNED"
    pay = _payloads(marker)
    g = _graph()
    h = _renamed(g, lambda k, name: f"n{k}" + pay[k % len(pay)], lambda f: "f" + f + pay[0])
    want = dfc.Session(g, mode="reference").call(*ARGS)
    s = dfc.Session(h, default_device="strict:0", num_threads=0, fuse_loops=True)
    np.testing.assert_array_equal(s.call(*ARGS), want)
    chains = [c for plan in s._plans.values() for prog in getattr(plan, "programs", {}).values()
              for c in prog.helpers.values() if isinstance(c, gpu_fusion.Chain)]
    assert chains and all(c.broken is None for c in chains)
    progs = [prog.source for plan in s._plans.values() for prog in getattr(plan, "programs", {}).values()]
    for src in [c.source for c in chains] + progs:
        _clean(src, list(h.nodes), marker)
    assert not marker.exists()


# ------------------------------------------------------------------ the loader refuses them


def _doc():
    return json.loads(serialize.to_json(_graph()))


def _rename_node(doc, old, new):
    for n in doc["nodes"]:
        if n["name"] == old:
            n["name"] = new
        n["inputs"] = [("^" + new if r == "^" + old else new + r[len(old):] if parse_input(r)[0] == old else r)
                       for r in n.get("inputs", [])]
    return doc


def _first(doc, op):
    return next(n for n in doc["nodes"] if n["op"] == op)


def _loaded_error(text):
    with pytest.raises(DfcGraphError) as e:
        serialize.loads(text)
    msg = str(e.value)
    assert len(msg) < 600 and msg.isprintable() and "[node " in msg, msg
    return msg


@pytest.mark.parametrize("bad", ["m\n            import os\n            #", "a'b", 'a"b', "a\\b", "a\x00b",
                                 "a\u2028b", "a\x85b", "a b", "a:b", "^a", "", "x" * 1_000_000])
def test_the_loader_refuses_a_node_name_outside_the_charset(bad):
    doc = _doc()
    old = _first(doc, "Mul")["name"]
    msg = _loaded_error(json.dumps(_rename_node(doc, old, bad)))
    assert "node name must be 1 to 256 characters among A-Z a-z 0-9 _ . / -" in msg


@pytest.mark.parametrize("field", ["frame_name", "device", "container", "dtype", "input", "loc"])
@pytest.mark.parametrize("bad", ["x\nimport os\n#", "x\x00", "x\u2028", "x\x85", "x" * 1_000_000])
def test_the_loader_refuses_hostile_strings_in_every_field(field, bad):
    doc = _doc()
    if field == "frame_name":
        for n in doc["nodes"]:
            if n["op"] == "Enter":
                n["attrs"]["frame_name"] = bad
        node = _first(doc, "Enter")
    elif field == "device":
        node = _first(doc, "Mul")
        node["device"] = bad
    elif field == "container":
        node = {"name": "q", "op": "QueueHandle", "inputs": [],
                "attrs": {"shared_name": "q", "container": bad, "capacity": 2, "dtypes": ["float64"]}}
        doc["nodes"].append(node)
    elif field == "dtype":
        node = _first(doc, "Placeholder")
        node["attrs"]["dtype"] = bad
    elif field == "input":
        node = _first(doc, "Mul")
        node["inputs"][0] = bad + ":0"
    else:
        node = _first(doc, "Mul")
        node["loc"] = bad
    msg = _loaded_error(json.dumps(doc))
    assert f"[node {node['name']}]" in msg


def test_print_templates_and_assert_messages_keep_their_newlines():
    def f(x):
        dfc.print("x =\n", x)
        dfc.Assert(x > -1.0, [x], message="x must be\n> -1")
        return x * 2.0
    g = dfc.trace(f, dfc.TensorSpec([], F64))
    assert serialize.to_json(serialize.loads(serialize.to_json(g))) == serialize.to_json(g)
    doc = json.loads(serialize.to_json(g))
    _first(doc, "Assert")["attrs"]["message"] = "bad\x00"
    _loaded_error(json.dumps(doc))


def test_traced_names_outside_the_charset_are_made_to_fit():
    def f(x):
        v = dfc.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + x), (np.int64(0), x), name="my loop:é")
        return v[1]
    g = dfc.trace(f, dfc.TensorSpec([], F64))
    again = serialize.loads(serialize.to_json(g))
    assert float(again(np.float64(1.5))) == 4.5
    assert any(n.startswith("my_loop__") for n in again.nodes)


def test_dfc_run_of_a_crafted_graph_file_runs_nothing(tmp_path):
    marker = tmp_path / "PWNED"
    g = dfc.trace(lambda x: dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2.0),
                                           (np.int64(0), x))[1], dfc.TensorSpec([], F64))
    doc = json.loads(serialize.to_json(g))
    old = _first(doc, "Mul")["name"]
    evil = "m\n            import os; os.system('touch " + str(marker) + "')\n            #"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(_rename_node(doc, old, evil)))
    r = subprocess.run([sys.executable, "-m", "dfc.cli", "run", str(path), "-i", "x=2.0"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    assert not marker.exists()
    assert r.returncode == 1 and r.stderr.startswith("dfc: error: [node ") and "internal error" not in r.stderr
    assert "node name must be" in r.stderr
