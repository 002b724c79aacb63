"""`xs.append(v)` -> `xs = ag__.list_append(xs, v)`.

The append becomes an assignment, so the analyses see `xs` modified and it
becomes a loop variable; in a tensor loop the list is then carried as a
TensorArray-backed list (see dfc.compiler.autograph.tensor_list).
"""
import gast

from dfc.compiler.autograph import analysis, templates
from dfc.compiler.autograph.transformer import Converter


class Lists(Converter):
    """Only lists held by local variables (or attributes/items of them) are rewritten:
    an assignment to a closure or global name would make it local."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.locals = []

    def visit_FunctionDef(self, node):
        local = set(analysis.param_names(node)) | analysis.writes(node.body)
        for n in gast.walk(node):
            if isinstance(n, (gast.Global, gast.Nonlocal)):
                local -= set(n.names)
        self.locals.append(local)
        self.generic_visit(node)
        self.locals.pop()
        return node

    def _is_local(self, target):
        qn = analysis.qn_of(target)
        return qn is not None and bool(self.locals) and analysis.base_name(qn) in self.locals[-1]

    def visit_Expr(self, node):
        call = node.value
        if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
                and call.func.attr == "append" and len(call.args) == 1 and not call.keywords
                and not isinstance(call.args[0], gast.Starred)
                and self._is_local(call.func.value)):
            self.generic_visit(node)
            stmts = templates.replace("target = ag__.list_append(target, value)",
                                      target=call.func.value, value=call.args[0])
            stmts[0]._dfc_list_append = analysis.qn_of(call.func.value)
            return self.mark(stmts, node)
        self.generic_visit(node)
        return node
