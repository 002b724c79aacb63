"""In-place changes of local lists (and other containers) become assignments.

    xs.append(v)      ->  xs = ag__.list_append(xs, v)
    xs.extend(vs)     ->  xs = ag__.list_extend(xs, vs)
    xs.pop(i)         ->  xs = ag__.list_pop(xs, i)[0]
    y = f(xs.pop())   ->  (xs, popped) = ag__.list_pop(xs); y = f(popped)
    del xs[i]         ->  xs = ag__.delitem(xs, i)
    xs[i] = v         ->  xs = ag__.setitem(xs, i, v)      (i not a constant)
    xs[i] += v        ->  xs = ag__.setitem(xs, i, xs[i] + v)

Each becomes an assignment, so the analyses see `xs` modified and it becomes
a variable of the enclosing if/loop. In a tensor loop a list that grows or
shrinks (append, extend, pop, del) is carried as a TensorList (see
dfc.compiler.autograph.tensor_list); `xs[i] = v` keeps a Python list of
fixed length (a tensor `i` selects with dfc.where). Constant subscripts
(`d['k'] = v`) stay as they are: the control-flow converter carries them
(unless the list is also grown or shrunk).
"""
import gast

from dfc.compiler.autograph import analysis, templates
from dfc.compiler.autograph.transformer import Converter

_GROW = {"append": "list_append", "extend": "list_extend"}


class Lists(Converter):
    """Only containers held by local variables (or attributes/items of them) are rewritten:
    an assignment to a closure or global name would make it local."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.locals = []
        self.resized = []      # per function: QNs that are appended to / popped / deleted from

    def visit_FunctionDef(self, node):
        local = set(analysis.param_names(node)) | analysis.writes(node.body)
        for n in gast.walk(node):
            if isinstance(n, (gast.Global, gast.Nonlocal)):
                local -= set(n.names)
        self.locals.append(local)
        self.resized.append(self._resized(node))
        self.generic_visit(node)
        self.resized.pop()
        self.locals.pop()
        return node

    def _resized(self, fn):
        out = set()
        for n in gast.walk(fn):
            target = None
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) \
                    and n.func.attr in ("append", "extend", "pop"):
                target = n.func.value
            elif isinstance(n, gast.Delete) and len(n.targets) == 1 \
                    and isinstance(n.targets[0], gast.Subscript):
                target = n.targets[0].value
            qn = analysis.qn_of(target) if target is not None else None
            if qn is not None:
                out.add(qn)
        return out

    def _is_local(self, target):
        qn = analysis.qn_of(target)
        return qn is not None and bool(self.locals) and analysis.base_name(qn) in self.locals[-1]

    def _list_site(self, stmts, target):
        """Mark the statement as a change of list `target` (the loop may carry it as tensors)."""
        stmts[0]._dfc_list_append = analysis.qn_of(target)
        return stmts

    # ------------------------------------------------------------ method calls
    def _method_call(self, call, names):
        if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
                and call.func.attr in names and not call.keywords
                and not any(isinstance(a, gast.Starred) for a in call.args)
                and self._is_local(call.func.value)):
            return call
        return None

    def visit_Expr(self, node):
        self.generic_visit(node)
        call = self._method_call(node.value, ("append", "extend", "pop"))
        if call is None:
            pops = self._hoist_pops(node, node.value, "value")
            return pops + [node] if pops else node
        target, method = call.func.value, call.func.attr
        if method in _GROW and len(call.args) == 1:
            stmts = templates.replace(f"target = ag__.{_GROW[method]}(target, value)",
                                      target=target, value=call.args[0])
        elif method == "pop" and len(call.args) <= 1:
            stmts = templates.replace("target = ag__.list_pop(target, *args)[0]", target=target,
                                      args=gast.Tuple(elts=list(call.args), ctx=gast.Load()))
        else:
            return node
        return self.mark(self._list_site(stmts, target), node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        pops = self._hoist_pops(node, node.value, "value")
        if len(node.targets) == 1 and self._item_target(node.targets[0]):
            sub = node.targets[0]
            stmts = templates.replace("target = ag__.setitem(target, index, value)",
                                      target=sub.value, index=sub.slice, value=node.value)
            return pops + self.mark(stmts, node)
        return pops + [node] if pops else node

    # ------------------------------------------------------------ pops inside expressions
    def _hoist_pops(self, stmt, expr, field):
        """`y = f(xs.pop())` -> `(xs, popped) = ag__.list_pop(xs); y = f(popped)`.

        Pops are taken out of `stmt.<field>` in evaluation order, except under `and`/`or`,
        `x if c else y`, lambdas and comprehensions (which may not evaluate them)."""
        calls = []
        self._find_pops(expr, calls)
        stmts = []
        for call in calls:
            tmp = self.ctx.namer.new("popped")
            target = call.func.value
            stmts.extend(self._list_site(templates.replace(
                "(target, result) = ag__.list_pop(target, *args)", target=target,
                result=templates.name(tmp, gast.Store()),
                args=gast.Tuple(elts=[_ReplacePops().visit(a) for a in call.args],
                                ctx=gast.Load())), target))
            call._dfc_popped = tmp
        if calls:
            setattr(stmt, field, _ReplacePops().visit(expr))
        return self.mark(stmts, stmt)

    def _find_pops(self, node, out):
        if isinstance(node, (gast.BoolOp, gast.IfExp, gast.Lambda, gast.ListComp, gast.SetComp,
                             gast.DictComp, gast.GeneratorExp)):
            return
        for child in gast.iter_child_nodes(node):
            self._find_pops(child, out)
        call = self._method_call(node, ("pop",))
        if call is not None and len(call.args) <= 1:
            out.append(call)

    def visit_Return(self, node):
        self.generic_visit(node)
        pops = self._hoist_pops(node, node.value, "value") if node.value is not None else []
        return pops + [node] if pops else node

    def visit_If(self, node):
        self.generic_visit(node)
        pops = self._hoist_pops(node, node.test, "test")
        return pops + [node] if pops else node

    # ------------------------------------------------------------ subscripts
    def _item_target(self, sub, pure_index=False):
        """A `container[index]` target this converter rewrites."""
        if not isinstance(sub, gast.Subscript) or not self._is_local(sub.value):
            return False
        index = sub.slice
        if isinstance(index, gast.Slice) or (isinstance(index, gast.Tuple) and any(
                isinstance(e, gast.Slice) for e in index.elts)):
            return False
        if pure_index and not isinstance(index, (gast.Name, gast.Constant)):
            return False     # `xs[f()] += v` would evaluate f() twice
        if analysis.qn_of(sub) is not None:     # a constant subscript
            return analysis.qn_of(sub.value) in self.resized[-1]
        return True

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        pops = self._hoist_pops(node, node.value, "value")
        sub = node.target
        if not self._item_target(sub, pure_index=True):
            return pops + [node] if pops else node
        stmts = templates.replace("target = ag__.setitem(target, index, target[index] + value)",
                                  target=sub.value, index=sub.slice, value=node.value)
        stmts[0].value.args[2].op = node.op      # the template's `+` is the statement's operator
        return pops + self.mark(stmts, node)

    def visit_Delete(self, node):
        self.generic_visit(node)
        if len(node.targets) != 1 or not self._item_target(node.targets[0]):
            return node
        sub = node.targets[0]
        stmts = templates.replace("target = ag__.delitem(target, index)", target=sub.value,
                                  index=sub.slice)
        return self.mark(self._list_site(stmts, sub.value), node)


class _ReplacePops(gast.NodeTransformer):
    """Each pop call marked by Lists._hoist_pops -> the name holding its result."""

    def visit_Call(self, node):
        tmp = getattr(node, "_dfc_popped", None)
        if tmp is not None:
            return templates.name(tmp)
        self.generic_visit(node)
        return node
