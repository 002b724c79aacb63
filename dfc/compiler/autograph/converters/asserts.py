"""`assert test, msg` -> `ag__.assert_stmt(test, lambda: msg)` (an Assert op on tensors)."""

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.transformer import Converter

class Asserts(Converter):
    def visit_Assert(self, node):
        self.generic_visit(node)
        if node.msg is None:
            stmts = templates.replace("ag__.assert_stmt(test, None)", test=node.test)
        else:
            stmts = templates.replace("ag__.assert_stmt(test, lambda: msg)", test=node.test, msg=node.msg)
        return self.mark(stmts, node)
