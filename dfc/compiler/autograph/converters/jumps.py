"""Shared lowering of break/continue/return into boolean flags.

After a statement that may jump, the rest of its block runs under
`if not flag:`; the jump itself becomes an assignment (e.g. `flag = True`).
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.origin import copy_origin, get_origin


def guard(rest, flag, origin_node):
    stmts = templates.replace("""
        if not flag:
            rest
    """, flag=flag, rest=rest)
    copy_origin(stmts, get_origin(origin_node))
    return stmts


class JumpLowering:
    """Lowers the jumps `is_jump` selects in a block.

    replace(jump) -> statements to put in its place.
    into_loops: whether nested loops are entered (returns: yes; break: no);
    on_loop(loop) is then called for every loop that may jump.
    namer: hands out the names a `finally` that may jump needs.
    """

    def __init__(self, is_jump, replace, flag, namer, into_loops=False, on_loop=None):
        self.is_jump, self.replace, self.flag, self.namer = is_jump, replace, flag, namer
        self.into_loops, self.on_loop = into_loops, on_loop

    def block(self, stmts):
        out = []
        for i, stmt in enumerate(stmts):
            if self.is_jump(stmt):
                out.extend(self.replace(stmt))
                return out, True
            new, may_jump = self.stmt(stmt)
            out.extend(new)
            if may_jump:
                rest, _ = self.block(stmts[i + 1:])
                if rest:
                    out.extend(guard(rest, self.flag, stmts[i + 1]))
                return out, True
        return out, False

    def stmt(self, node):
        if isinstance(node, gast.If):
            node.body, a = self.block(node.body)
            node.orelse, b = self.block(node.orelse)
            if not node.body:
                node.body = [gast.Pass()]
            return [node], a or b
        if isinstance(node, gast.With):
            node.body, a = self.block(node.body)
            return [node], a
        if isinstance(node, gast.Try):
            jumps = False
            for part in [node] + node.handlers:
                for field in ("body", "orelse"):
                    stmts = getattr(part, field, None)
                    if stmts:
                        new, may_jump = self.block(stmts)
                        setattr(part, field, new or [gast.Pass()])
                        jumps = jumps or may_jump
            if node.finalbody:
                new, may_jump = self.block(node.finalbody)
                if may_jump:
                    return self._jumping_finally(node, new), True
                node.finalbody = new or [gast.Pass()]
            return [node], jumps
        if self.into_loops and isinstance(node, (gast.While, gast.For)):
            node.body, a = self.block(node.body)
            if a and self.on_loop is not None:
                self.on_loop(node)
            return [node], a
        return [node], False

    def _jumping_finally(self, node, finalbody):
        """A `try` whose `finally` may jump, as Python runs it: the `finally` starts with no jump
        pending (its own statements run even when the `try` returned), and a jump it makes
        replaces the `try`'s pending jump or exception (which it swallows):

            error = None                       pending = flag
            try:                               flag = False
                body (+ except/else)     ->    finalbody
            except BaseException as e:         flag = ag__.finally_exit(flag, pending, error)
                error = e
        """
        error, caught, pending = (self.namer.new(n) for n in ("finally_error", "error", "pending"))
        inner = node.body
        if node.handlers:
            node.finalbody = []
            inner = [node]
        stmts = templates.replace("""
            error = None
            try:
                inner
            except BaseException as caught:
                error = caught
            pending = flag
            flag = False
        """, error=error, inner=inner, caught=caught, pending=pending, flag=self.flag)
        stmts += finalbody
        stmts += templates.replace("flag = ag__.finally_exit(flag, pending, error)",
                                   flag=self.flag, pending=pending, error=error)
        copy_origin(stmts, get_origin(node))
        return stmts
