"""Lowers `break`/`continue` to flags, so loop bodies have no jumps.

    while test:              break_ = False
        a                    while not break_ and test:
        if c: break   ->         a
        b                        if c: break_ = True
    else:                        if not break_: b
        e                    if not break_: e

A `for` gets the flag as an extra test (`_dfc_extra_flags`), so for_stmt
stops before taking the next element. The `else:` of every loop is moved
after it (guarded by the flag when the loop breaks).
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.converters.jumps import JumpLowering, guard
from dfc.compiler.autograph.transformer import Converter, walk_loop_body


def _has(stmts, kind):
    return any(isinstance(n, kind) for n in walk_loop_body(stmts))


def add_loop_flag(loop, flag):
    """Make `loop` stop once `flag` is true."""
    if isinstance(loop, gast.While):
        loop.test = gast.BoolOp(op=gast.And(), values=[
            templates.replace_as_expression("not flag", flag=flag), loop.test])
    else:
        loop._dfc_extra_flags = [flag] + list(getattr(loop, "_dfc_extra_flags", []))


class BreakContinue(Converter):
    def _visit_loop(self, node):
        self.generic_visit(node)  # inner loops first: their jumps are theirs
        if _has(node.body, gast.Continue):
            flag = self.ctx.namer.new("continue_")
            lower = JumpLowering(lambda s: isinstance(s, gast.Continue),
                                 lambda s: self._set(flag, s), flag, self.ctx.namer)
            body, _ = lower.block(node.body)
            node.body = self._set(flag, node, False) + body
        out = []
        orelse, node.orelse = node.orelse, []
        if _has(node.body, gast.Break):
            flag = self.ctx.namer.new("break_")
            lower = JumpLowering(lambda s: isinstance(s, gast.Break),
                                 lambda s: self._set(flag, s), flag, self.ctx.namer)
            node.body, _ = lower.block(node.body)
            add_loop_flag(node, flag)
            out.extend(self._set(flag, node, False))
            out.append(node)
            if orelse:
                out.extend(guard(orelse, flag, orelse[0]))
        else:
            out.append(node)
            out.extend(orelse)
        return out

    visit_While = _visit_loop
    visit_For = _visit_loop

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        return node

    def _set(self, flag, origin_node, value=True):
        stmts = templates.replace("flag = value", flag=flag, value=templates.const(value))
        return self.mark(stmts, origin_node)
