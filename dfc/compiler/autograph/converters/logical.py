"""Lazy logical operators and conditional expressions.

    a and b      -> ag__.and_(lambda: a, lambda: b)
    a or b       -> ag__.or_(lambda: a, lambda: b)
    not a        -> ag__.not_(a)
    a < b < c    -> ag__.compare_chain(lambda: a, (lambda: b, lambda lhs_, rhs_: lhs_ < rhs_),
                                      (lambda: c, lambda lhs_, rhs_: lhs_ < rhs_))
    x if c else y -> ag__.if_exp(c, lambda: x, lambda: y)

On tensors the right operand is evaluated only in the branch of a cond that
needs it; on Python values these are plain Python semantics. Each operand of
a chained comparison is evaluated at most once, as in Python.
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.transformer import Converter


def _lambda(expr):
    return templates.replace_as_expression("lambda: expr", expr=expr)


def _has_walrus(node):
    return any(isinstance(n, gast.NamedExpr) for n in gast.walk(node))


class Logical(Converter):
    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if _has_walrus(node):
            return node
        fn = "and_" if isinstance(node.op, gast.And) else "or_"
        call = templates.replace_as_expression(f"ag__.{fn}()")
        call.args = [_lambda(v) for v in node.values]
        return self.mark(call, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, gast.Not):
            return node
        return self.mark(templates.replace_as_expression("ag__.not_(x)", x=node.operand), node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) < 2 or _has_walrus(node):
            return node
        call = templates.replace_as_expression("ag__.compare_chain(first)", first=_lambda(node.left))
        for op, operand in zip(node.ops, node.comparators):
            compare = templates.replace_as_expression("lambda lhs_, rhs_: lhs_ < rhs_")
            compare.body.ops = [op]
            call.args.append(gast.Tuple(elts=[_lambda(operand), compare], ctx=gast.Load()))
        return self.mark(call, node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        new = templates.replace_as_expression("ag__.if_exp(test, lambda: body, lambda: orelse)",
                                              test=node.test, body=node.body, orelse=node.orelse)
        return self.mark(new, node)
