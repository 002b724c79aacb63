"""Base class of the converters and the per-function conversion context."""
import gast

from dfc.compiler.autograph import origin
from dfc.compiler.autograph.errors import DfcUnsupportedSyntaxError


class Context:
    """What every converter of one function shares: the namer and the file."""

    def __init__(self, namer, filename, freevars=()):
        self.namer = namer
        self.filename = filename
        self.freevars = tuple(freevars)


class Converter(gast.NodeTransformer):
    """A pass over one function tree. Subclasses override visit_* methods.

    `self.ctx` is the Context; generated nodes should get the origin of the
    user node they replace via `self.mark(new_nodes, old_node)`.
    """

    def __init__(self, ctx):
        self.ctx = ctx

    @classmethod
    def transform(cls, node, ctx):
        return cls(ctx).visit(node)

    def mark(self, new_nodes, old_node):
        origin.copy_origin(new_nodes, origin.get_origin(old_node))
        return new_nodes

    def error(self, node, message, cls=DfcUnsupportedSyntaxError):
        return cls(message, loc=origin.format_loc(origin.get_origin(node)))

    def visit_block(self, stmts):
        out = []
        for stmt in stmts:
            new = self.visit(stmt)
            if new is None:
                continue
            out.extend(new if isinstance(new, list) else [new])
        return out


def walk_no_nested(node):
    """Like gast.walk but does not enter nested functions, lambdas or classes."""
    todo = list(gast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            todo.extend(gast.iter_child_nodes(n))


def walk_loop_body(stmts):
    """Nodes of a loop body that belong to that loop (not nested loops/defs)."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef, gast.While, gast.For)):
            todo.extend(gast.iter_child_nodes(n))
        elif isinstance(n, (gast.While, gast.For)):
            todo.extend(n.orelse)  # `else` of a nested loop still belongs to us
