"""Reject syntax that cannot be converted, with the user's line: `yield`, and a
`break`/`continue` in a `finally` that would cancel a pending jump of its `try`.
(Control flow inside `try` is converted; only a tensor if/loop there is an
error, raised while tracing.) `global`/`nonlocal` statements move to the top
of their function: the bodies of ifs and loops become nested functions, which
declare those names the same way (see control_flow.py)."""
import gast

from dfc.compiler.autograph.origin import copy_origin, get_origin
from dfc.compiler.autograph.transformer import Converter, walk_loop_body, walk_no_nested

_SCOPES = (gast.FunctionDef, gast.Lambda, gast.ClassDef)


class Checks(Converter):
    def visit_Yield(self, node):
        raise self.error(node, "`yield` is not supported in dfc.function; "
                               "return a list or use dfc.TensorArray instead")

    visit_YieldFrom = visit_Yield

    def visit_Try(self, node):
        # A jump in a `finally` cancels the `try`'s pending one. Returns are lowered after
        # break/continue, so a `return` there still wins over a pending break/continue, but a
        # `break`/`continue` there cannot cancel a pending `return` (or a `continue` a `break`).
        jumps = [n for n in walk_loop_body(node.finalbody) if isinstance(n, (gast.Break, gast.Continue))]
        if jumps:
            tried = node.body + node.orelse + [s for h in node.handlers for s in h.body]
            stronger = [n for s in tried if not isinstance(s, _SCOPES)
                        for n in [s, *walk_no_nested(s)] if isinstance(n, gast.Return)]
            if any(isinstance(j, gast.Continue) for j in jumps):
                stronger += [n for n in walk_loop_body(tried) if isinstance(n, gast.Break)]
            if stronger:
                jump = jumps[0]
                kind = "break" if isinstance(jump, gast.Break) else "continue"
                other = "return" if isinstance(stronger[0], gast.Return) else "break"
                raise self.error(jump, f"this `{kind}` in a `finally` would cancel the `{other}` "
                                       f"of its `try`, which dfc.function cannot express; move "
                                       f"the `{kind}` out of the `finally`")
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node):
        _hoist_declarations(node)
        self.generic_visit(node)
        return node


def _hoist_declarations(fn):
    """One `global` and one `nonlocal` statement first in fn (after its docstring). Python
    applies them to the whole function wherever they stand (and rejects a use before them)."""
    names = {gast.Global: [], gast.Nonlocal: []}

    def strip(stmts):
        out = []
        for stmt in stmts:
            if isinstance(stmt, (gast.Global, gast.Nonlocal)):
                names[type(stmt)].extend(n for n in stmt.names if n not in names[type(stmt)])
                continue
            if not isinstance(stmt, _SCOPES):
                for field in ("body", "orelse", "finalbody"):
                    if getattr(stmt, field, None):
                        setattr(stmt, field, strip(getattr(stmt, field)))
                for handler in getattr(stmt, "handlers", None) or []:
                    handler.body = strip(handler.body)
                for case in getattr(stmt, "cases", None) or []:
                    case.body = strip(case.body)
            out.append(stmt)
        return out or [gast.Pass()]

    fn.body = strip(fn.body)
    head = [kind(names=found) for kind, found in names.items() if found]
    if not head:
        return
    docstring = 1 if (isinstance(fn.body[0], gast.Expr) and isinstance(fn.body[0].value, gast.Constant)
                      and isinstance(fn.body[0].value.value, str)) else 0
    for stmt in head:
        copy_origin([stmt], get_origin(fn))
    fn.body[docstring:docstring] = head

