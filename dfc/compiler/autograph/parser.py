"""Getting a function's source as a gast tree, and turning trees back into code."""
import ast
import inspect
import textwrap

import gast

from dfc.compiler.autograph import origin


class SourceUnavailable(Exception):
    """The function has no source we can read (REPL, exec, C code)."""


def function_source(fn):
    """(dedented source, filename, line offset) of fn's definition.

    Found through fn's code object: inspect follows `__wrapped__` from a function (a
    functools.wraps wrapper would give the wrapped function's source and lose the wrapper's).
    """
    code = getattr(fn, "__code__", fn)
    try:
        lines, first = inspect.getsourcelines(code)
        filename = inspect.getsourcefile(code) or inspect.getfile(code)
    except (OSError, TypeError) as e:
        raise SourceUnavailable(str(e)) from None
    return textwrap.dedent("".join(lines)), filename, max(first, 1) - 1


def parse_function(fn):
    """The FunctionDef (or Lambda) node of fn, with user origins on every node."""
    source, filename, offset = function_source(fn)
    if getattr(fn, "__code__", None) is not None and fn.__code__.co_name == "<lambda>":
        return _parse_lambda(fn, source, filename, offset)
    try:
        tree = gast.parse(source)
    except SyntaxError as e:
        raise SourceUnavailable(str(e)) from None
    node = tree.body[0]
    if not isinstance(node, gast.FunctionDef):
        raise SourceUnavailable(f"source of {fn.__qualname__} is not a def")
    origin.annotate_user_tree(node, filename, offset)
    return node


def _parse_lambda(fn, source, filename, offset):
    tree = None
    text = source.strip()
    for candidate in (text, text.rstrip(",;)"), "(" + text + ")"):
        try:
            tree = gast.parse(candidate)
            break
        except SyntaxError:
            continue
    if tree is None:
        raise SourceUnavailable("lambda source does not parse on its own")
    code_args = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    found = [n for n in gast.walk(tree) if isinstance(n, gast.Lambda)
             and tuple(a.id for a in n.args.args) == tuple(code_args)]
    if len(found) != 1:
        raise SourceUnavailable("cannot tell which lambda on its line this is")
    origin.annotate_user_tree(found[0], filename, offset)
    return found[0]


def unparse(node):
    """Readable Python source for a gast tree."""
    tree = gast.gast_to_ast(node)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
