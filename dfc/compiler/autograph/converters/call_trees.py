"""Every call `f(a, *b, k=v, **kw)` -> `ag__.converted_call(f, (a, *b), {'k': v, **kw})`.

converted_call decides at trace time whether f is user code to convert
(recursively, cached) or library code to call as-is. Zero-argument
`super()` is rewritten to `super(__class__, self)` since the converted
function has no implicit class cell.

An f-string is a call of format() per field; it becomes
`ag__.format_string("text", ag__.format_value(x, conversion, spec), ...)`,
which is Python's f-string unless a field is a symbolic tensor (see
dfc.compiler.autograph.strings).
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.transformer import Converter

_KEEP = {"super", "locals", "globals", "vars", "eval", "exec", "__import__"}


class CallTrees(Converter):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.first_args = []

    def visit_FunctionDef(self, node):
        node.decorator_list = node.decorator_list  # decorators are left as they are
        args = node.args.posonlyargs + node.args.args
        self.first_args.append(args[0].id if args else None)
        node.body = self.visit_block(node.body)
        for i, d in enumerate(node.args.defaults):
            node.args.defaults[i] = self.visit(d)
        self.first_args.pop()
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, gast.Name) and func.id in _KEEP:
            if func.id == "super" and not node.args and "__class__" in self.ctx.freevars \
                    and self.first_args and self.first_args[-1]:
                node.args = [templates.name("__class__"), templates.name(self.first_args[-1])]
            return node
        if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) \
                and func.value.id == "ag__":
            return node
        args = gast.Tuple(elts=list(node.args), ctx=gast.Load())
        if node.keywords:
            keys = [templates.const(k.arg) if k.arg is not None else None for k in node.keywords]
            kwargs = gast.Dict(keys=keys, values=[k.value for k in node.keywords])
        else:
            kwargs = templates.const(None)
        new = templates.replace_as_expression("ag__.converted_call(func, args, kwargs)",
                                              func=func, args=args, kwargs=kwargs)
        return self.mark(new, node)

    def visit_JoinedStr(self, node):
        self.generic_visit(node)
        parts = []
        for value in node.values:
            if isinstance(value, gast.FormattedValue):
                spec = value.format_spec if value.format_spec is not None else templates.const("")
                parts.append(templates.replace_as_expression(
                    "ag__.format_value(value, conversion, spec)", value=value.value,
                    conversion=templates.const(value.conversion), spec=spec))
            else:
                parts.append(value)
        new = templates.replace_as_expression("ag__.format_string(*parts)",
                                              parts=gast.Tuple(elts=parts, ctx=gast.Load()))
        return self.mark(new, node)
