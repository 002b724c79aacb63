"""The code generators write source only through dfc/runtime/emit.py: read from their own source (AST).

emit.fmt/join/subst and Lines.w take a template written in the generator and parts that must be emit.Code
(checked when they run); so what this file checks makes graph text unable to reach generated source:
templates are constants, only emit.py makes Code or executes source, and no generator interpolates a
graph string (a name, frame name, device, location) into text except in an error message."""
import ast
import pathlib

import numpy as np
import pytest

from dfc.runtime import emit as E

DFC = pathlib.Path(__file__).resolve().parents[2] / "dfc"
RUNTIME = DFC / "runtime"
# fully emitter-built: every line is Lines.w / fmt / join / subst of Code
EMITTERS = [RUNTIME / "fused.py", RUNTIME / "fused_root.py", RUNTIME / "gpu_fusion.py"]
# every module that writes generated source (the numba ones are checked token by token: emit.check_module)
GENERATORS = EMITTERS + [RUNTIME / "chains.py"] + sorted((RUNTIME / "compiled").glob("*.py")) + \
    sorted((RUNTIME / "kernels").glob("*_lower.py")) + [RUNTIME / "kernels" / "lowering.py"]
# the only places that execute source: the emitter, and the disk cache of numba modules (check_module's text)
EXECUTORS = {RUNTIME / "emit.py", RUNTIME / "compiled" / "cache.py"}
GRAPH_STRINGS = {"name", "frame_names", "loc", "device", "var", "op_name", "shared_name", "container"}
TEMPLATE_ARG = {"fmt": 0, "join": 0, "subst": 0, "w": 1}


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
    calls = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in TEMPLATE_ARG:
            k = TEMPLATE_ARG[_callee(node)]
            if len(node.args) > k:
                calls += 1
                assert _constant(node.args[k], tables), f"{path.name}:{node.lineno}: template is not a constant"
    assert calls > 5


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


def _interpolations(tree):
    """(node, inside an error message) of each f-string, `%`, `+` of strings and .format call."""
    out = []

    def visit(node, in_error):
        in_error = in_error or isinstance(node, ast.Raise) or isinstance(node, ast.Call) and _error_call(node)
        if isinstance(node, ast.JoinedStr) or isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)) \
                or isinstance(node, ast.Call) and _callee(node) == "format":
            out.append((node, in_error))
        for child in ast.iter_child_nodes(node):
            visit(child, in_error)
    visit(tree, False)
    return out


@pytest.mark.parametrize("path", GENERATORS, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_no_generator_interpolates_a_graph_string_into_text(path):
    for node, in_error in _interpolations(_tree(path)):
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


@pytest.mark.parametrize("line", ["    # mul\n", "    x = 'a\\nb'", "    x = f'{y}'", "    import os",
                                  "    x = __import__", "    x = eval", "    x = '\u2028'", "    x = b'1'"])
def test_check_module_refuses_what_no_generator_writes(line):
    head = ["import numpy as np", "def run(K):"]
    assert E.check_module(head + ["    # node 3", "    x = np.int64(1)", "    return (x, )"])
    with pytest.raises(E.EmitError):
        E.check_module(head + [line, "    return (1, )"])
