"""The conversion pipeline: user function -> converted Python function.

    fn --parse--> gast --converters--> gast --unparse--> source --compile-->
    factory(ag__, *freevars) --> new function sharing fn's globals and cells

Conversion happens once per code object (cached); binding to a particular
closure/defaults is cheap and happens on every call.
"""
import itertools
import types

import gast

from dfc.compiler.autograph import analysis, origin, parser, templates, var_names
from dfc.compiler.autograph.converters import (asserts, break_continue, call_trees, checks,
                                               control_flow, deletes, lists, logical, returns)
from dfc.compiler.autograph.naming import Namer
from dfc.compiler.autograph.transformer import Context

# Order matters: jumps are lowered before control flow (which then sees only
# if/while/for), and logical operators after the jump guards that use `not`.
PIPELINE = (
    checks.Checks,
    deletes.Deletes,
    break_continue.BreakContinue,
    returns.Returns,
    asserts.Asserts,
    lists.Lists,
    call_trees.CallTrees,
    logical.Logical,
    "analysis",
    control_flow.ControlFlow,
)


class ConvertedCode:
    """The result of converting one code object."""

    def __init__(self, code, source, filename, fn_name, freevars):
        self.code, self.source, self.filename = code, source, filename
        self.fn_name, self.freevars = fn_name, freevars


_cache = {}
_lambda_counter = itertools.count()


def convert_tree(node, ctx):
    for step in PIPELINE:
        if step == "analysis":
            for fn in gast.walk(node):
                if isinstance(fn, gast.FunctionDef):
                    analysis.analyze_function(fn)
                    break
            continue
        node = step.transform(node, ctx)
    return node


def convert_code(fn):
    """Convert fn's code (cached per code object)."""
    key = (fn.__code__, fn.__code__.co_filename)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    node = parser.parse_function(fn)
    var_names.record_function(node)
    if isinstance(node, gast.Lambda):
        name = f"lambda__{next(_lambda_counter)}"
        body = templates.replace("return expr", expr=node.body)
        origin.copy_origin(body, origin.get_origin(node))
        node = gast.FunctionDef(name=name, args=node.args, body=body, decorator_list=[],
                                returns=None, type_comment=None, type_params=[])
        origin.copy_origin(node, origin.get_origin(node.body[0]))
    node.decorator_list = []
    node.returns = None
    freevars = fn.__code__.co_freevars
    ctx = Context(Namer(node), origin.get_origin(node)[0] if origin.get_origin(node) else "?",
                  freevars)
    node = convert_tree(node, ctx)
    factory_args = ", ".join(("ag__",) + freevars)
    module = gast.parse(f"def dfc_factory__({factory_args}):\n    pass\n")
    factory = module.body[0]
    factory.body = [node] + templates.replace("return fn", fn=node.name)
    source = parser.unparse(module)
    filename = origin.generated_filename(fn.__module__, fn.__qualname__)
    reparsed = gast.parse(source)
    line_map = origin.build_line_map(module, reparsed, source.count("\n") + 1)
    origin.register(filename, source, line_map)
    factory_code = compile(source, filename, "exec").co_consts
    code = _find_code(factory_code, node.name)
    result = ConvertedCode(code, _inner_source(source), filename, node.name, freevars)
    _cache[key] = result
    return result


def _find_code(consts, name):
    for c in consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name:
                return c
            found = _find_code(c.co_consts, name)
            if found is not None:
                return found
    return None


def _inner_source(source):
    lines = source.splitlines()[1:]
    body = [l[4:] if l.startswith("    ") else l for l in lines]
    while body and body[-1].strip().startswith("return "):
        body.pop()
        break
    return "\n".join(body).rstrip() + "\n"


def instantiate(fn, converted):
    """A new function running the converted code with fn's globals, cells and defaults."""
    from dfc.compiler.autograph import operators
    cells = {}
    if fn.__closure__:
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__))
    closure = []
    for name in converted.code.co_freevars:
        if name == "ag__":
            closure.append(types.CellType(operators))
        elif name in cells:
            closure.append(cells[name])
        else:  # the function naming itself (recursion): a global lookup in the original
            closure.append(types.CellType(fn.__globals__.get(name, fn)))
    new = types.FunctionType(converted.code, fn.__globals__, fn.__name__,
                             fn.__defaults__, tuple(closure) or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(getattr(fn, "__dict__", {}))
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__dfc_converted__ = True
    new.__dfc_source__ = converted.source
    new.__wrapped__ = fn
    return new


def convert(fn):
    """The converted version of the plain Python function fn."""
    return instantiate(fn, convert_code(fn))


# generated filename of converted code -> {callee code object: callee function}: the user
# functions that code called through converted_call while it was traced (calls.py records them).
CALLEES = {}


def record_callee(caller_filename, fn):
    """Remember that the converted code in `caller_filename` called user function fn."""
    CALLEES.setdefault(caller_filename, {}).setdefault(fn.__code__, fn)


def source_with_callees(fn):
    """The converted source of fn, then that of every user function it calls (found by name in
    its globals and closure, or seen called while it was traced), each converted callee once,
    headed by a comment naming its file:line."""
    from dfc.compiler.autograph import calls
    parts, seen, todo = [], set(), [fn]
    while todo:
        f = todo.pop(0)
        if f.__code__ in seen:
            continue
        seen.add(f.__code__)
        try:
            converted = convert_code(f)
        except Exception:      # noqa: BLE001 - a callee that cannot be converted runs as it is
            if f is fn:
                raise
            continue
        if f is not fn:
            where = f"{f.__code__.co_filename}:{f.__code__.co_firstlineno}"
            parts.append(f"\n# ---- converted callee {f.__qualname__} ({where})\n")
        parts.append(converted.source)
        found = list(_named_callees(f)) + list(CALLEES.get(converted.filename, {}).values())
        todo.extend(c for c in found if c.__code__ not in seen and calls.user_function(c))
    return "".join(parts)


def _named_callees(fn):
    """User functions fn calls by a global or closure name (or module.name)."""
    try:
        node = parser.parse_function(fn)
    except parser.SourceUnavailable:
        return
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    for call in gast.walk(node):
        if not isinstance(call, gast.Call):
            continue
        target = _resolve(call.func, fn.__globals__, cells)
        from dfc.compiler.autograph.function import Function
        if isinstance(target, Function):
            target = target.python_function
        if isinstance(target, types.FunctionType):
            yield target


def _resolve(expr, globals_, cells):
    if isinstance(expr, gast.Name):
        if expr.id in cells:
            try:
                return cells[expr.id].cell_contents
            except ValueError:      # an empty cell
                return None
        return globals_.get(expr.id)
    if isinstance(expr, gast.Attribute):
        owner = _resolve(expr.value, globals_, cells)
        if isinstance(owner, types.ModuleType):
            try:
                return getattr(owner, expr.attr, None)
            except Exception:      # noqa: BLE001 - a module's own __getattr__ failing
                return None
    return None
