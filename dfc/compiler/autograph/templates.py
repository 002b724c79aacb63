"""Code templates with placeholders, so converters never hand-build AST.

    replace('''
        def body_name():
            nonlocal state_names
            body
    ''', body_name='if_body', state_names=['x', 'y'], body=stmts)

A placeholder is a plain identifier of the template. It may stand for
  - a name (str): renames Name nodes, function names, nonlocal entries;
  - an expression node: replaces the Name (context is fixed up);
  - a list of statements: replaces an expression-statement `placeholder`;
  - a list of str in `nonlocal`: expands the entry (an empty list drops the
    statement).
"""
import copy
import textwrap

import gast


def _as_expr(value, ctx):
    if isinstance(value, str):
        return gast.Name(id=value, ctx=ctx, annotation=None, type_comment=None)
    node = copy.deepcopy(value)
    _set_ctx(node, ctx)
    return node


def _set_ctx(node, ctx):
    if isinstance(node, (gast.Name, gast.Attribute, gast.Subscript, gast.Starred)):
        node.ctx = ctx
        if isinstance(node, gast.Starred):
            _set_ctx(node.value, ctx)
    elif isinstance(node, (gast.Tuple, gast.List)):
        node.ctx = ctx
        for elt in node.elts:
            _set_ctx(elt, ctx)


class _Replacer(gast.NodeTransformer):
    def __init__(self, replacements):
        self.replacements = replacements

    def visit_Expr(self, node):
        if isinstance(node.value, gast.Name) and node.value.id in self.replacements:
            value = self.replacements[node.value.id]
            if isinstance(value, (list, tuple)):
                return list(value)  # statements are moved, not copied
            if isinstance(value, gast.stmt):
                return copy.deepcopy(value)
        self.generic_visit(node)
        return node

    def visit_Name(self, node):
        if node.id in self.replacements:
            return _as_expr(self.replacements[node.id], node.ctx)
        return node

    def visit_FunctionDef(self, node):
        if node.name in self.replacements:
            node.name = self.replacements[node.name]
        self.generic_visit(node)
        return node

    def visit_Nonlocal(self, node):
        names = []
        for name in node.names:
            value = self.replacements.get(name, name)
            names.extend([value] if isinstance(value, str) else list(value))
        if not names:
            return None
        node.names = sorted(set(names), key=names.index)
        return node

    visit_Global = visit_Nonlocal


_PARSED = {}


def replace(template, **replacements):
    """Parse `template` and substitute placeholders; returns a list of statements."""
    parsed = _PARSED.get(template)
    if parsed is None:
        parsed = _PARSED[template] = gast.parse(textwrap.dedent(template))
    tree = copy.deepcopy(parsed)
    tree = _Replacer(replacements).visit(tree)
    return tree.body


def replace_as_expression(template, **replacements):
    stmts = replace(template, **replacements)
    assert len(stmts) == 1 and isinstance(stmts[0], gast.Expr)
    return stmts[0].value


def name(id_, ctx=None):
    return gast.Name(id=id_, ctx=ctx or gast.Load(), annotation=None, type_comment=None)


def const(value):
    return gast.Constant(value=value, kind=None)


def str_tuple(names):
    return gast.Tuple(elts=[const(n) for n in names], ctx=gast.Load())
