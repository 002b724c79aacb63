"""`xs.append(v)` -> `xs = ag__.list_append(xs, v)`.

The append becomes an assignment, so the analyses see `xs` modified and it
becomes a loop variable; in a tensor loop the list is then carried as a
TensorArray-backed list (see dfc.compiler.autograph.tensor_list).
"""
import gast

from dfc.compiler.autograph import analysis, templates
from dfc.compiler.autograph.transformer import Converter


class Lists(Converter):
    def visit_Expr(self, node):
        call = node.value
        if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
                and call.func.attr == "append" and len(call.args) == 1 and not call.keywords
                and not isinstance(call.args[0], gast.Starred)
                and analysis.qn_of(call.func.value) is not None):
            self.generic_visit(node)
            stmts = templates.replace("target = ag__.list_append(target, value)",
                                      target=call.func.value, value=call.args[0])
            stmts[0]._dfc_list_append = analysis.qn_of(call.func.value)
            return self.mark(stmts, node)
        self.generic_visit(node)
        return node
