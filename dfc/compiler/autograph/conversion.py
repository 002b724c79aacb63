"""The conversion pipeline: user function -> converted Python function.

    fn --parse--> gast --converters--> gast --unparse--> source --compile-->
    factory(ag__, *freevars) --> new function sharing fn's globals and cells

Conversion happens once per code object (cached); binding to a particular
closure/defaults is cheap and happens on every call.
"""
import itertools
import types

import gast

from dfc.compiler.autograph import analysis, origin, parser, templates
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
