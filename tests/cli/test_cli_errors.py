"""The CLI never prints a Python traceback for a user mistake (issue 9, section 4).

Each case checks the exit status (1 for a DfcError, 2 for bad usage), that
stderr has no "Traceback" and that the message names what was wrong. Most run
in-process through click's CliRunner; interrupts and closed pipes need a real
process.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
from unittest import mock

import numpy as np
import pytest
from click.testing import CliRunner

import dfc
from dfc.ir import checks
from dfc.cli import main
from dfc.ir.viz import to_dot, to_mermaid
from tests import clitools


def cli(*args):
    """Run `dfc ARGS` in-process; no exception may escape the command."""
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    assert "Traceback" not in r.stderr, r.stderr
    return r


def error(r, code, *words):
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """Saved graphs: `special` returns inf, -inf, nan; `loop` is a while loop of (x, n)."""
    d = tmp_path_factory.mktemp("graphs")

    def special(x):
        return x / 0.0, -x / 0.0, (x * 0.0) / 0.0, dfc.stack([x, x / 0.0])

    def loop(x, n):
        return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x), (0, dfc.zeros([2])))

    dfc.save(dfc.trace(special, dfc.TensorSpec([], "float32")), str(d / "special.json"))
    dfc.save(dfc.trace(loop, dfc.TensorSpec([2], "float32"), dfc.TensorSpec([], "int64")), str(d / "loop.json"))
    return d


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------------ --output
def test_output_into_missing_directory(graphs, tmp_path):
    out = tmp_path / "missing" / "out.npz"
    err = error(cli("run", graphs / "special.json", "-i", "x=1", "--output", out), 1, "--output", "does not exist")
    assert str(tmp_path / "missing") in err
    assert not out.parent.exists()


def test_output_under_a_file(graphs, tmp_path):
    (tmp_path / "somefile.txt").write_text("hi")
    for out in ("somefile.txt/out.npz", "somefile.txt/a/b/out.npz"):
        err = error(cli("run", graphs / "special.json", "-i", "x=1", "--output", tmp_path / out), 1,
                    "is a file, not a directory")
        assert "somefile.txt" in err
    assert (tmp_path / "somefile.txt").read_text() == "hi"


def test_output_keeps_the_exact_name(graphs, tmp_path):
    out = tmp_path / "result"
    r = cli("run", graphs / "loop.json", "-i", "x=[1, 2]", "-i", "n=3", "--output", out)
    assert r.exit_code == 0, r.stderr
    assert out.is_file() and not (tmp_path / "result.npz").exists()
    with np.load(out) as z:
        np.testing.assert_array_equal(z["output_1"], np.array([3, 6], np.float32))
    assert "no suffix is added" in " ".join(cli("run", "--help").stdout.split())


def test_compile_output_under_a_file(tmp_path):
    src = write(tmp_path / "prog_ok.py", """
        import dfc
        @dfc.function(input_signature=[dfc.TensorSpec([], "float32")])
        def double(x):
            return x * 2.0
    """)
    (tmp_path / "somefile.txt").write_text("hi")
    error(cli("compile", src, "-o", tmp_path / "somefile.txt" / "sub"), 1, "cannot create output directory",
          "somefile.txt")
    r = cli("compile", src, "-o", tmp_path / "new" / "dir")      # a missing directory is created
    assert r.exit_code == 0 and (tmp_path / "new" / "dir" / "double.json").is_file()


# ------------------------------------------------------- the user's own module
def test_module_raising_at_import_shows_the_users_frames(tmp_path):
    src = write(tmp_path / "raises_at_import.py", """
        import dfc

        def helper():
            raise ValueError("boom in user code")

        helper()
    """)
    err = error(cli("compile", src), 1, "ValueError", "boom in user code", "raises_at_import.py:5")
    assert f'File "{src}", line 7, in <module>' in err and "helper()" in err
    assert f'File "{src}", line 5, in helper' in err and 'raise ValueError("boom in user code")' in err
    assert "dfc/compiler" not in err and "importlib" not in err and "click" not in err


def test_name_error_while_tracing_names_the_users_line(tmp_path):
    src = write(tmp_path / "name_error.py", """
        import dfc

        @dfc.function(input_signature=[dfc.TensorSpec([], "float32")])
        def f(x):
            y = x + 1.0
            return y + undefined_name
    """)
    err = error(cli("compile", src), 1, "NameError", "undefined_name", "tracing dfc.function 'f'",
                "name_error.py:7")
    assert f'File "{src}", line 7, in f' in err and "return y + undefined_name" in err
    assert "<dfc:" not in err and "dfc/compiler" not in err


def test_imported_helper_module_frames_are_shown(tmp_path):
    write(tmp_path / "helper_mod_d.py", """
        def setup():
            return {}["missing key"]
    """)
    src = write(tmp_path / "uses_helper.py", """
        import helper_mod_d
        helper_mod_d.setup()
    """)
    err = error(cli("compile", src), 1, "KeyError", "missing key")
    assert "helper_mod_d.py" in err and "uses_helper.py" in err


def test_dfc_error_at_import_names_the_users_line(tmp_path):
    src = write(tmp_path / "bad_spec.py", """
        import dfc

        @dfc.function(input_signature=[dfc.TensorSpec([], "float31")])
        def f(x):
            return x
    """)
    error(cli("compile", src), 1, "bad_spec.py:4", "float31")


@pytest.mark.parametrize("code", ["3", "0", "'bye'"])
def test_sys_exit_in_compiled_module(tmp_path, code):
    src = write(tmp_path / f"exits_{len(code)}.py", f"""
        import sys
        sys.exit({code})
    """)
    error(cli("compile", src), 1, f"sys.exit({code})", 'if __name__ == "__main__"')


def test_sys_exit_while_tracing(tmp_path):
    src = write(tmp_path / "exits_in_trace.py", """
        import sys
        import dfc

        @dfc.function(input_signature=[dfc.TensorSpec([], "float32")])
        def f(x):
            sys.exit(3)
    """)
    error(cli("compile", src), 1, "sys.exit(3)", "tracing dfc.function 'f'")


def test_compile_files_that_are_not_python(tmp_path):
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"x = 1\x00\xff\n")
    err = error(cli("compile", binary), 1, "binary.py")
    assert "null bytes" in err or "not a Python source" in err
    bad = write(tmp_path / "bad_syntax.py", "def f(:\n")
    error(cli("compile", bad), 1, "bad_syntax.py:1", "syntax error")
    # A file without the .py suffix is Python all the same.
    plain = write(tmp_path / "script_no_suffix", """
        import dfc
        @dfc.function(input_signature=[dfc.TensorSpec([], "float32")])
        def half(x):
            return x / 2.0
    """)
    r = cli("compile", plain, "-o", tmp_path)
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "half.json").is_file()


def test_compile_a_directory_is_usage_error(tmp_path):
    error(cli("compile", tmp_path), 2, "is a directory")


# ------------------------------------------------------------------- --input
def test_duplicate_input_is_a_usage_error(graphs):
    error(cli("run", graphs / "loop.json", "-i", "x=[1, 2]", "-i", "n=1", "-i", "n=2"), 2,
          "--input n is given twice")


@pytest.mark.parametrize("value,words", [
    ("[" * 100000, ["input x", "is not a number"]),           # json: RecursionError
    ("9" * 5000, ["input x", "is not a number"]),             # json: ValueError (digit limit)
    ("(" * 300, ["input x", "is not a number"]),
    ("[1, 2", ["input x", "is not a number"]),
])
def test_bad_input_literals(graphs, value, words):
    err = error(cli("run", graphs / "loop.json", "-i", f"x={value}", "-i", "n=1"), 1, *words)
    assert len(err) < 300 and len(err.strip().splitlines()) == 1


def test_bad_npy_files(graphs, tmp_path):
    loop = graphs / "loop.json"
    (tmp_path / "text.npy").write_text("not an array\n")
    error(cli("run", loop, "-i", f"x=@{tmp_path / 'text.npy'}", "-i", "n=1"), 1, "text.npy", "not an .npy file")
    np.savez(tmp_path / "arch.npz", a=np.zeros(2))
    error(cli("run", loop, "-i", f"x=@{tmp_path / 'arch.npz'}", "-i", "n=1"), 1, "arch.npz", "an .npz archive")
    error(cli("run", loop, "-i", f"x=@{tmp_path}", "-i", "n=1"), 1, "cannot load", str(tmp_path))
    np.save(tmp_path / "objects.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    error(cli("run", loop, "-i", f"x=@{tmp_path / 'objects.npy'}", "-i", "n=1"), 1, "objects.npy")
    full = tmp_path / "full.npy"
    np.save(full, np.arange(1000.0))
    (tmp_path / "cut.npy").write_bytes(full.read_bytes()[:300])
    error(cli("run", loop, "-i", f"x=@{tmp_path / 'cut.npy'}", "-i", "n=1"), 1, "cut.npy")


# ------------------------------------------------------------------ --json
def strict_json(text):
    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_json_with_nan_and_infinity_is_strict_json(graphs):
    r = cli("run", graphs / "special.json", "-i", "x=1", "--json")
    assert r.exit_code == 0, r.stderr
    assert strict_json(r.stdout) == {"outputs": ["Infinity", "-Infinity", "NaN", [1.0, "Infinity"]]}
    help_text = " ".join(cli("run", "--help").stdout.split())
    assert '"NaN", "Infinity" and "-Infinity"' in help_text


# ------------------------------------------------------------ graph files
def test_graph_file_that_is_a_directory(tmp_path):
    for cmd in (["run"], ["show"], ["viz", "-o", tmp_path / "g.dot"]):
        error(cli(cmd[0], tmp_path, *cmd[1:]), 2, "is a directory")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_graph_file(graphs, tmp_path):
    path = tmp_path / "locked.json"
    shutil.copy(graphs / "loop.json", path)
    path.chmod(0)
    for cmd in ("run", "show"):
        error(cli(cmd, path), 1, "cannot read", "locked.json")


def test_bad_device_map(graphs):
    loop = graphs / "loop.json"
    error(cli("run", loop, "-i", "x=[1, 2]", "-i", "n=1", "--device-map", "cpu:0=bogus"), 1, "bogus")
    error(cli("show", loop, "--partitions", "--device-map", "cpu:0=bogus"), 1, "bogus")
    error(cli("run", loop, "--device-map", "cpu:0"), 2, "FROM=TO")
    error(cli("show", loop, "--device-map", "=cpu:1"), 2, "FROM=TO")


def test_viz_output_errors(graphs, tmp_path):
    (tmp_path / "somefile.txt").write_text("hi")
    error(cli("viz", graphs / "loop.json", "-o", tmp_path / "somefile.txt" / "g.dot"), 1, "cannot write")
    error(cli("viz", graphs / "loop.json", "-o", tmp_path / "g.png"), 1, "g.png", ".dot")


def test_unexpected_error_is_one_line_unless_debug(graphs, monkeypatch):
    import dfc.ir.serialize

    def broken(path):
        raise RuntimeError("simulated dfc bug")
    monkeypatch.setattr(dfc.ir.serialize, "load", broken)
    err = error(cli("show", graphs / "loop.json"), 1, "internal error", "simulated dfc bug", "--debug")
    assert len(err.strip().splitlines()) == 2
    r = CliRunner().invoke(main, ["--debug", "show", str(graphs / "loop.json")])
    assert isinstance(r.exception, RuntimeError)


# ---------------------------------------------------- interrupts and pipes
def printing_loop(path):
    """Save at path a graph that prints `step i` for each i < n (a run that goes on printing)."""
    def steps(n):
        def body(i):
            dfc.print("step", i)
            return i + 1
        return dfc.while_loop(lambda i: i < n, body, dfc.constant(0, "int64"))
    dfc.save(dfc.trace(steps, dfc.TensorSpec([], "int64")), str(path))
    return path


# `dfc ARGS` as from an interactive shell: SIGINT delivered and handled (a child inherits an ignored or blocked
# SIGINT from its parent, and a test process may have one: the CI suite saw `dfc run` go on printing after it)
_AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                       "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); sys.argv[0] = 'dfc'; "
                       "runpy.run_module('dfc.cli', run_name='__main__')")


def _signals(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return " ".join(line.strip() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt", "SigPnd")))
    except OSError:
        return "?"


def test_ctrl_c_during_a_run(tmp_path):
    path = printing_loop(tmp_path / "forever.json")
    p = clitools.start_python("-c", _AS_FROM_A_TERMINAL, "run", path, "-i", "n=1000000000")
    try:
        assert p.stdout.readline().startswith("step")
        before = _signals(p.pid)
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"dfc run went on after SIGINT; its signal masks before: {before}, "
                                 f"now: {_signals(p.pid)}") from None
    finally:
        p.kill()
    assert p.returncode == 1 and "dfc: interrupted" in err and "Traceback" not in err, err


def test_closed_pipe_is_quiet(tmp_path):
    def long_chain(x):
        for _ in range(3000):
            x = x + 1.0
        return x
    path = tmp_path / "long.json"
    dfc.save(dfc.trace(long_chain, dfc.TensorSpec([], "float32")), str(path))
    p = clitools.start_dfc("show", path)
    first = p.stdout.readline()
    p.stdout.close()                        # like `dfc show long.json | head -1`
    err = p.stderr.read()
    p.wait(timeout=60)
    assert first.startswith("#")
    assert p.returncode in (0, 1) and "Traceback" not in err and "Exception ignored" not in err, err


def test_in_graph_print_to_a_closed_pipe_is_quiet(tmp_path):
    path = printing_loop(tmp_path / "chatty.json")
    p = clitools.start_dfc("run", path, "-i", "n=1000000")      # like `dfc run chatty.json | head -1`
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=60)
    assert first.startswith("step") and p.returncode == 1 and err == "", err


# -------------------------------------------------------- --memory-limit, --checkpoint-dir
class RecordingSession:
    """Stands in for Session to see what `dfc run` passes to it."""
    seen = {}

    def __init__(self, graph, **kw):
        RecordingSession.seen = kw

    def call_flat(self, **feeds):
        return [np.float32(0)]


@pytest.mark.parametrize("text,nbytes", [("2GB", 2 * 10**9), ("2gb", 2 * 10**9), ("1.5KiB", 1536),
                                         ("100", 100), ("3 MiB", 3 * 2**20), ("1KB", 1000), ("64B", 64)])
def test_memory_limit_units(graphs, monkeypatch, text, nbytes):
    import dfc.runtime.session
    monkeypatch.setattr(dfc.runtime.session, "Session", RecordingSession)
    r = cli("run", graphs / "special.json", "-i", "x=1", "--memory-limit", text)
    assert r.exit_code == 0, r.stderr
    assert RecordingSession.seen["memory_limit"] == nbytes


@pytest.mark.parametrize("text", ["2XB", "GB", "-1GB", "0", "1e9", "2 G B", ""])
def test_bad_memory_limit_is_a_usage_error(graphs, text):
    error(cli("run", graphs / "special.json", "-i", "x=1", "--memory-limit", text), 2, "--memory-limit")


def test_checkpoint_dir_is_passed_to_the_session(graphs, tmp_path, monkeypatch):
    import dfc.runtime.session
    monkeypatch.setattr(dfc.runtime.session, "Session", RecordingSession)
    assert cli("run", graphs / "special.json", "-i", "x=1", "--checkpoint-dir", tmp_path).exit_code == 0
    assert RecordingSession.seen["checkpoint_dir"] == str(tmp_path)
    assert "memory_limit" not in RecordingSession.seen
    assert cli("run", graphs / "special.json", "-i", "x=1").exit_code == 0
    assert RecordingSession.seen["checkpoint_dir"] == "."          # the current directory
    (tmp_path / "somefile.txt").write_text("hi")
    error(cli("run", graphs / "special.json", "--checkpoint-dir", tmp_path / "somefile.txt"), 2, "somefile.txt")
    error(cli("run", graphs / "special.json", "--checkpoint-dir", tmp_path / "nope"), 2, "nope")


# ----------------------------------------------------------- viz escaping
NASTY = ['"', "\\", "\n", "<b>", "&amp;", "#35;", "end", "\\\"", "a\\", "\t\x01", "[x]", "{y}", "(z)", "|", "`"]


def nasty_name(k, name):
    return f"{name}{NASTY[k % len(NASTY)]}"


def renamed(graph_path, out_path):
    """The graph with every node and frame name holding characters that need escaping. The loader refuses
    such names (test_hostile_names); a graph built in Python can still hold them, and the drawings must
    escape them, so this loads the file with the name rules switched off."""
    d = json.loads(graph_path.read_text())
    names = {n["name"]: nasty_name(k, n["name"]) for k, n in enumerate(d["nodes"])}

    def ref(r):
        if r.startswith("^"):
            return "^" + names[r[1:]]
        name, _, port = r.rpartition(":")
        return f"{names[name]}:{port}"

    def fix_refs(x):
        if isinstance(x, dict):
            return {k: (ref(v) if k == "ref" else fix_refs(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [fix_refs(v) for v in x]
        return x
    for n in d["nodes"]:
        n["name"] = names[n["name"]]
        n["inputs"] = [ref(r) for r in n["inputs"]]
        if "frame_name" in n.get("attrs", {}):
            n["attrs"]["frame_name"] += '"\\<frame>\n'
    for inp in d["signature"]["inputs"]:
        inp["node"] = names[inp["node"]]
    d["signature"]["outputs"] = fix_refs(d["signature"]["outputs"])
    out_path.write_text(json.dumps(d))
    with mock.patch.object(checks, "check_name", lambda *a, **k: None):
        return dfc.load(str(out_path))


def dot_strings(text):
    """The quoted strings of a dot file, read as Graphviz's lexer does (only \\" is an escape;
    \\\\ stays two characters); raises on an unterminated string or stray characters."""
    out, i = [], 0
    while i < len(text):
        if text[i] != '"':
            if not re.match(r'[\w\s=;,\[\]{}>-]', text[i]):
                raise AssertionError(f"stray {text[i]!r} at {i} outside a quoted string")
            i += 1
            continue
        j, chars = i + 1, []
        while True:
            if j >= len(text):
                raise AssertionError("unterminated string")
            if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in '"\\':
                chars.append(text[j:j + 2] if text[j + 1] == "\\" else '"')
                j += 2
            elif text[j] == '"':
                break
            else:
                chars.append(text[j])
                j += 1
        out.append("".join(chars))
        i = j + 1
    return out


def unescape_dot_id(s):
    """Invert dfc's escaping of a name (after dot's own lexing)."""
    return re.sub(r'\\(\\|n|u([0-9a-f]{4}))', lambda m: "\\" if m.group(1) == "\\" else
                  "\n" if m.group(1) == "n" else chr(int(m.group(2), 16)), s)


def test_dot_escapes_node_and_frame_names(graphs, tmp_path):
    g = renamed(graphs / "loop.json", tmp_path / "nasty.json")
    text = to_dot(g)
    lines = text.splitlines()
    assert len(lines) == len(text.split("\n")) - 1              # no name broke a line
    ids = set()
    for line in lines[2:-1]:
        strings = dot_strings(line)
        if "->" in line:
            src, dst = strings[0], strings[1]
            assert unescape_dot_id(src) in g.nodes and unescape_dot_id(dst) in g.nodes, line
        elif line.strip().startswith("subgraph"):
            assert unescape_dot_id(strings[0]).startswith("cluster_while\"\\<frame>\n"), line
        elif strings:
            ids.add(unescape_dot_id(strings[0]))
    assert ids == set(g.nodes)
    r = cli("viz", tmp_path / "nasty.json", "-o", tmp_path / "nasty.dot")     # the file itself is refused
    assert r.exit_code == 1 and "DfcGraphError" not in r.output and "node" in r.output, r.output
    assert not (tmp_path / "nasty.dot").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_dot_output_is_accepted_by_graphviz(graphs, tmp_path):
    g = renamed(graphs / "loop.json", tmp_path / "nasty.json")
    res = subprocess.run(["dot", "-Tjson"], input=to_dot(g), capture_output=True, text=True, check=False)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    drawn = json.loads(res.stdout)
    names = {unescape_dot_id(o["name"]) for o in drawn["objects"] if "nodes" not in o}
    assert names == set(g.nodes)
    assert len(drawn["edges"]) == sum(len(n.inputs) for n in g.nodes.values())


def test_mermaid_escapes_node_and_frame_names(graphs, tmp_path):
    g = renamed(graphs / "loop.json", tmp_path / "nasty.json")
    lines = to_mermaid(g).splitlines()
    assert lines[0] == "flowchart TD"
    label = r'"(?:[A-Za-z0-9 _.,:/+*=%^~!?@$-]|#\d+;)*"'
    labels, ids, edges = [], set(), []
    for line in lines[1:]:
        s = line.strip()
        if m := re.fullmatch(rf"(n\d+)\[({label})\]", s):
            ids.add(m.group(1))
            labels.append(re.sub(r"#(\d+);", lambda e: chr(int(e.group(1))), m.group(2)[1:-1]))
        elif m := re.fullmatch(rf"subgraph f\d+ \[({label})\]", s):
            assert re.sub(r"#(\d+);", lambda e: chr(int(e.group(1))), m.group(1)[1:-1]).endswith("<frame>\n")
        elif m := re.fullmatch(r"(n\d+) (-->|-\.->) (n\d+)", s):
            edges.append((m.group(1), m.group(3)))
        else:
            assert s == "end", line
    assert sorted(labels) == sorted(f"{name}: {n.op}" for name, n in g.nodes.items())
    assert len(edges) == sum(len(n.inputs) for n in g.nodes.values())
    assert {e for edge in edges for e in edge} <= ids


# ------------------------------------------------- Save/Restore under --checkpoint-dir
def saving_graph(path, save_to, var_name):
    v = dfc.Variable(np.zeros(2, np.float32), name=var_name)
    ckpt = dfc.Checkpoint([v])

    @dfc.function(input_signature=[dfc.TensorSpec([2], "float32")])
    def train(x):
        v.assign(x)
        ckpt.save(save_to)
        return v.read_value()
    dfc.save(train.trace(), str(path))
    return path


def test_save_goes_under_the_checkpoint_dir(tmp_path, monkeypatch):
    graph = saving_graph(tmp_path / "saver.json", "ck.npz", "w_cli_saver")
    (tmp_path / "ckdir").mkdir()
    r = cli("run", graph, "-i", "x=[1, 2]", "--checkpoint-dir", tmp_path / "ckdir")
    assert r.exit_code == 0, r.stderr
    with np.load(tmp_path / "ckdir" / "ck.npz") as z:
        np.testing.assert_array_equal(z["w_cli_saver"], [1, 2])
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")                 # default: the current directory
    assert cli("run", graph, "-i", "x=[3, 4]").exit_code == 0
    with np.load(tmp_path / "cwd" / "ck.npz") as z:
        np.testing.assert_array_equal(z["w_cli_saver"], [3, 4])


@pytest.mark.parametrize("where", ["../escape.npz", "ABSOLUTE"])
def test_save_outside_the_checkpoint_dir_is_refused(tmp_path, where):
    target = str(tmp_path / "abs.npz") if where == "ABSOLUTE" else where
    graph = saving_graph(tmp_path / "escaper.json", target, f"w_cli_escape_{len(where)}")
    (tmp_path / "ckdir").mkdir()
    error(cli("run", graph, "-i", "x=[1, 2]", "--checkpoint-dir", tmp_path / "ckdir"), 1, target,
          "checkpoint directory")
    assert not (tmp_path / "escape.npz").exists() and not (tmp_path / "abs.npz").exists()


# ------------------------------------------------------------ --memory-limit, enforced
def test_memory_limit_stops_a_run_that_allocates_too_much(tmp_path):
    def big(n):
        return dfc.reduce_sum(dfc.ones(dfc.stack([n, n]), "float64"))
    path = tmp_path / "big.json"
    dfc.save(dfc.trace(big, dfc.TensorSpec([], "int64")), str(path))
    r = cli("run", path, "-i", "n=1000", "--memory-limit", "1MB", "--json")         # needs 8 MB
    error(r, 1, "memory limit of 1000000 bytes", "fill")
    r = cli("run", path, "-i", "n=1000", "--memory-limit", "64MiB", "--json")
    assert r.exit_code == 0, r.stderr
    assert strict_json(r.stdout) == {"outputs": [1e6]}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_is_an_error_not_a_bug(graphs):
    with open("/dev/full", "w") as full:
        p = clitools.dfc("show", graphs / "loop.json", stdout=full)
    assert p.returncode == 1 and "No space left" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "bug in dfc" not in p.stderr
