"""The code generators write source only through dfc/runtime/emit.py: read from their own source (AST).

emit.fmt/join/subst, Lines.w and the numba lowerings' Emit.stmt take a template written in the generator and
parts that must be emit.Code (checked when they run), and emit.source / emit.check_module take only lines
that are Code; so what this file checks makes graph text unable to reach generated source: templates are
constants, the generators build no text of their own (no f-string, %, .format or + of strings outside error
messages), only emit.py makes Code or executes source, and no generator interpolates a graph string (a
name, frame name, device, location) into text except in an error message."""
import ast
import pathlib

import numpy as np
import pytest

from dfc.runtime import emit as E

DFC = pathlib.Path(__file__).resolve().parents[2] / "dfc"
RUNTIME = DFC / "runtime"
COMPILED = RUNTIME / "compiled"
# fully emitter-built: every line is Lines.w / Emit.stmt / fmt / join / subst of Code
EMITTERS = [RUNTIME / "fused.py", RUNTIME / "fused_root.py", RUNTIME / "gpu_fusion.py", COMPILED / "codegen.py",
            COMPILED / "fusion.py", COMPILED / "buffers.py", COMPILED / "root.py",
            RUNTIME / "kernels" / "lowering.py"] + sorted((RUNTIME / "kernels").glob("*_lower.py"))
# functions of the emitters that make text only for people (dfc show's "not fused" reasons, a repr)
DISPLAY = {"describe", "__repr__"}
# every module that writes generated source (the numba ones are checked token by token: emit.check_module)
GENERATORS = EMITTERS + [RUNTIME / "chains.py"] + sorted((RUNTIME / "compiled").glob("*.py")) + \
    sorted((RUNTIME / "kernels").glob("*_lower.py")) + [RUNTIME / "kernels" / "lowering.py"]
# the only places that execute source: the emitter, and the disk cache of numba modules (check_module's text)
EXECUTORS = {RUNTIME / "emit.py", RUNTIME / "compiled" / "cache.py"}
GRAPH_STRINGS = {"name", "frame_names", "loc", "device", "var", "op_name", "shared_name", "container"}
TEMPLATE_ARG = {"fmt": 0, "join": 0, "subst": 0, "w": 1, "stmt": 0}


def _tree(path):
    return ast.parse(path.read_text(), str(path))


def _constant_tables(tree):
    """Module-level names bound to a literal dict or tuple (a table of templates written in the module)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                ast.literal_eval(node.value)
            except ValueError:
                continue
            out.add(node.targets[0].id)
    return out


def _constant(node, tables):
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.IfExp):
        return _constant(node.body, tables) and _constant(node.orelse, tables)
    if isinstance(node, ast.Subscript):
        base = node.value
        while isinstance(base, ast.Subscript):
            base = base.value
        return isinstance(base, ast.Name) and base.id in tables
    return False


def _callee(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


@pytest.mark.parametrize("path", EMITTERS, ids=lambda p: p.name)
def test_every_emitted_template_is_a_constant_of_the_generator(path):
    tree = _tree(path)
    tables = _constant_tables(tree)
    # a method named like the emitter's (Emit.stmt, FrameSource.w) hands its `template` parameter on: its own
    # callers are checked
    forwarded = {id(call.args[TEMPLATE_ARG[_callee(call)]]) for f in ast.walk(tree)
                 if isinstance(f, ast.FunctionDef) and f.name in TEMPLATE_ARG
                 for call in ast.walk(f) if isinstance(call, ast.Call) and _callee(call) in TEMPLATE_ARG
                 and len(call.args) > TEMPLATE_ARG[_callee(call)]
                 and getattr(call.args[TEMPLATE_ARG[_callee(call)]], "id", None) == "template"}
    calls = 0
    for node, in_error in _nodes(tree):
        if not in_error and isinstance(node, ast.Call) and _callee(node) in TEMPLATE_ARG:
            k = TEMPLATE_ARG[_callee(node)]
            if len(node.args) > k and id(node.args[k]) not in forwarded:
                calls += 1
                assert _constant(node.args[k], tables), f"{path.name}:{node.lineno}: template is not a constant"
    assert calls >= 2


@pytest.mark.parametrize("path", EMITTERS, ids=lambda p: p.name)
def test_the_emitters_build_no_text_of_their_own(path):
    """Text reaches a line only through the emitter: an f-string, %, .format or + of strings is allowed only in
    an error message or a function whose text is for people (DISPLAY), never in a template or a part."""
    for node, in_error in _interpolations(_tree(path)):
        assert in_error, f"{path.name}:{node.lineno}: text built outside the emitter: {ast.unparse(node)[:60]}"


@pytest.mark.parametrize("path", sorted(RUNTIME.rglob("*.py")), ids=lambda p: str(p.relative_to(RUNTIME)))
def test_only_the_emitter_makes_code_or_executes_source(path):
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval",
                                                                                              "compile"):
            assert path in EXECUTORS, f"{path.name}:{node.lineno}: {node.func.id}() outside emit.py"
        if path.name != "emit.py":
            assert not (isinstance(node, ast.Attribute) and node.attr in ("Code", "_code")), \
                f"{path.name}:{node.lineno}: emit.Code made outside the emitter"
            assert not (isinstance(node, ast.Name) and node.id in ("Code", "_code")), f"{path.name}:{node.lineno}"


def _error_call(node):
    """A call whose string arguments only make an error message (codegen.Type's `what` names the value in
    the Unsupported it raises)."""
    name = _callee(node) or ""
    return name.endswith("Error") or name in ("Blocked", "Unsupported", "NotFusable", "NoLoop", "kernel_error",
                                              "Type")


def _nodes(tree):
    """(node, inside an error message or a DISPLAY function) of every node of tree: a raise, a call making an
    error, an exception class, an except clause (text about an exception)."""
    out = []

    def visit(node, in_error):
        in_error = in_error or isinstance(node, (ast.Raise, ast.ExceptHandler)) \
            or isinstance(node, ast.Call) and _error_call(node) \
            or isinstance(node, ast.FunctionDef) and node.name in DISPLAY \
            or isinstance(node, ast.ClassDef) and any(getattr(b, "id", "").endswith(("Exception", "Error"))
                                                      for b in node.bases)
        out.append((node, in_error))
        for child in ast.iter_child_nodes(node):
            visit(child, in_error)
    visit(tree, False)
    return out


def _text(node):
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)


def _interpolations(tree):
    """(node, inside an error message) of each f-string, `%` and `+` with a string and .format call."""
    return [(node, in_error) for node, in_error in _nodes(tree)
            if isinstance(node, ast.JoinedStr) or isinstance(node, ast.Call) and _callee(node) == "format"
            or isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _text(node.left)
            or isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (_text(node.left) or _text(node.right))]


def _any_interpolation(tree):
    """(node, inside an error message) of each f-string, `%`, `+` and .format call (strings or not)."""
    return [(node, in_error) for node, in_error in _nodes(tree)
            if isinstance(node, ast.JoinedStr) or isinstance(node, ast.Call) and _callee(node) == "format"
            or isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add))]


@pytest.mark.parametrize("path", GENERATORS, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_no_generator_interpolates_a_graph_string_into_text(path):
    for node, in_error in _any_interpolation(_tree(path)):
        if in_error:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in GRAPH_STRINGS:
                raise AssertionError(f"{path.name}:{node.lineno}: .{sub.attr} of the graph in generated text")
            if isinstance(sub, ast.Call) and _callee(sub) == "dumps":
                raise AssertionError(f"{path.name}:{node.lineno}: JSON of the graph in generated text (emit.blob)")


# ------------------------------------------------------------------ the emitter refuses what it did not make


def test_the_emitter_takes_only_its_own_identifiers_and_literals():
    v = E.ident("v", 3, 0)
    assert v == "v3_0" and E.fmt("{} = {}", v, E.lit(np.int64(-2))) == "v3_0 = -2"
    assert E.lit((1, 2.5, True, None, float("nan"))) == "(1, 2.5, True, None, float('nan'), )"
    assert E.blob(b"a\n'") == "'610a27'"
    for bad in (lambda: E.fmt("{}", "v3_0"), lambda: E.fmt("{}", E.ident("v", 1) + "x"),
                lambda: E.ident("v\n", 1), lambda: E.ident("v", "1"), lambda: E.ident("v", True),
                lambda: E.ident("v", -1), lambda: E.lit("x"), lambda: E.lit(object()),
                lambda: E.fmt("{} {}", v), lambda: E.join(", ", [v, "x"]),
                lambda: E.Lines().w(E.indent(0), "# {}", E.fmt("a\u2028")), lambda: E.Lines().add("x = 1"),
                lambda: E.source(["x = 1"]), lambda: E.run("x = 1", {}, "t"),
                lambda: E.subst("{0} {1}", v)):
        with pytest.raises(E.EmitError):
            bad()


def _made(lines):
    """lines as if a generator had made them Code (what check_module guards against: a regression)."""
    return [E._code(x) for x in lines]


@pytest.mark.parametrize("line", ["    # mul\n", "    x = 'a\\nb'", "    x = f'{y}'", "    import os",
                                  "    x = __import__", "    x = eval", "    x = '\u2028'", "    x = b'1'"])
def test_check_module_refuses_what_no_generator_writes(line):
    head = ["import numpy as np", "def run(K):"]
    assert E.check_module(_made(head + ["    # node 3", "    x = np.int64(1)", "    return (x, )"]))
    with pytest.raises(E.EmitError):
        E.check_module([E._code(x) if x != line else x for x in head + [line, "    return (1, )"]]
                       if "\n" in line or "\u2028" in line else _made(head + [line, "    return (1, )"]))


def test_check_module_takes_only_lines_the_emitter_made():
    ok = E.fmt("    x = np.int64({})", E.lit(1))
    lines = _made(["import numpy as np", "def run(K):"]) + [ok, E.fmt("    return (x, )")]
    assert E.check_module(lines)
    for plain in ("    x = np.int64(1)", ok + "", str(ok)):
        with pytest.raises(E.EmitError, match="did not make"):
            E.check_module(lines[:2] + [plain] + lines[3:])


def test_dtype_names_come_only_from_dfcs_dtype_list():
    from dfc.runtime.kernels.lowering import scalar_type
    assert [scalar_type(d) for d in ("float32", "int64", "bool")] == ["np.float32", "np.int64", "np.bool_"]
    for bad in ("float16", "resource", "float32)\nimport os", "os.system", np.dtype("float32"), None):
        with pytest.raises(E.EmitError):
            E.dtype(bad)
