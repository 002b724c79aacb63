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

A function whose only return is its last statement is left alone.
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
        flag = self.ctx.namer.new("do_return")
        value = self.ctx.namer.new("retval_")

        def replace(ret):
            stmts = templates.replace("""
                flag = True
                value = result
            """, flag=flag, value=value,
                result=ret.value if ret.value is not None else templates.const(None))
            return self.mark(stmts, ret)

        lower = JumpLowering(lambda s: isinstance(s, gast.Return), replace, flag,
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
