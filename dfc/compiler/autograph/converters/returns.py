"""Lowers `return` to a flag and a value, so every function has one exit.

    def f(x):                      def f(x):
        for v in x:                    do_return = False
            if v > 0:                  retval_ = ag__.UndefinedReturnValue()
                return v      ->       for v in x:            # + extra test: not do_return
        return -1                          if v > 0:
                                               do_return = True
                                               retval_ = v
                                       if not do_return:
                                           do_return = True
                                           retval_ = -1
                                       return ag__.retval(retval_)

A function whose only return is its last statement is left alone. When the
end of the function can be reached, it gets an explicit `return None`
(Python's implicit one), so a tensor `if` that returns a tensor in one branch
and falls off the end in the other is an error naming the variable, never a
made-up value.
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.converters.break_continue import add_loop_flag
from dfc.compiler.autograph.converters.jumps import JumpLowering
from dfc.compiler.autograph.transformer import Converter, walk_no_nested


class Returns(Converter):
    def visit_FunctionDef(self, node):
        self.generic_visit(node)  # nested functions have their own returns
        returns = [n for n in walk_no_nested(node) if isinstance(n, gast.Return)]
        if not returns or (len(returns) == 1 and node.body[-1] is returns[0]):
            return node
        if not always_leaves(node.body):
            node.body = node.body + self.mark(templates.replace("return None"), node.body[-1])
        flag = self.ctx.namer.new("do_return")
        value = self.ctx.namer.new("retval_")

        def replace(ret):
            # the value first: if computing it raises (and a `try` catches that), no return happened
            stmts = templates.replace("""
                value = result
                flag = True
            """, flag=flag, value=value,
                result=ret.value if ret.value is not None else templates.const(None))
            return self.mark(stmts, ret)

        lower = JumpLowering(lambda s: isinstance(s, gast.Return), replace, flag, self.ctx.namer,
                             into_loops=True, on_loop=lambda loop: add_loop_flag(loop, flag))
        body, _ = lower.block(node.body)
        head = self.mark(templates.replace("""
            flag = False
            value = ag__.UndefinedReturnValue()
        """, flag=flag, value=value), node.body[0])
        tail = self.mark(templates.replace("return ag__.retval(value)", value=value), returns[-1])
        docstring = []
        if body and isinstance(body[0], gast.Expr) and isinstance(body[0].value, gast.Constant) \
                and isinstance(body[0].value.value, str):
            docstring, body = body[:1], body[1:]
        node.body = docstring + head + body + tail
        return node


def always_leaves(stmts):
    """Whether running stmts always ends in a `return` or `raise` (never reaches their end)."""
    return any(_leaves(s) for s in stmts)


def _leaves(node):
    if isinstance(node, (gast.Return, gast.Raise)):
        return True
    if isinstance(node, gast.If):
        return always_leaves(node.body) and always_leaves(node.orelse)
    if isinstance(node, gast.While):
        # `while True:` without `break` (a break would have made the test `not break_ and True`)
        return isinstance(node.test, gast.Constant) and bool(node.test.value)
    if isinstance(node, gast.With):
        return always_leaves(node.body)
    if isinstance(node, gast.Try):
        if always_leaves(node.finalbody):
            return True
        return ((always_leaves(node.body) or always_leaves(node.orelse))
                and all(always_leaves(h.body) for h in node.handlers))
    return False
