"""if/while/for -> calls of ag__.if_stmt / while_stmt / for_stmt.

    if x > 0:                     def get_state():
        y = x                         return (y,)
    else:             ->          def set_state(vars_):
        y = -x                        nonlocal y
                                      (y,) = vars_
                                  def if_body():
                                      nonlocal y
                                      y = x
                                  def else_body():
                                      nonlocal y
                                      y = -x
                                  ag__.if_stmt(x > 0, if_body, else_body, get_state, set_state, ('y',))

The state is the modified variables that are live afterwards (for loops:
live at the loop head), sorted, plain names first; modified attributes and
constant subscripts (`self.x`, `d['k']`) are always state. An `if` also
carries, after those outputs, the modified variables its branches read
before writing: both branches are traced in turn, and each must start from
the values before the `if` (as in AutoGraph, `nouts` says how many of the
state variables are outputs).
Variables no definition reaches get `x = ag__.Undefined('x')` first, so
`nonlocal` always has a binding and misuse is reported by name. The nested
functions declare the user's `global` names `global` instead of `nonlocal`.
"""
import gast

from dfc.compiler.autograph import analysis, templates
from dfc.compiler.autograph.transformer import Converter


class ControlFlow(Converter):
    @classmethod
    def transform(cls, node, ctx):
        converter = cls(ctx)
        converter.maybe_undefined = set()
        converter.try_depth = 0
        converter.globals = [set()]     # per function: its global names (declared `global` in
                                        # the nested functions made for its ifs and loops too)
        converter.maybe_undefined.update(n._dfc_deletes for n in gast.walk(node)
                                         if hasattr(n, "_dfc_deletes"))
        node = converter.visit(node)
        if converter.maybe_undefined:
            node = _WrapLoads(converter.maybe_undefined).visit(node)
        return node

    # ------------------------------------------------------------ state
    def _state(self, node, live):
        mod = node._dfc_modified
        plain = sorted(q for q in mod if not analysis.is_composite(q) and q in live)
        composite = sorted(q for q in mod if analysis.is_composite(q)
                           and not any(p in mod for p in analysis.qn_parents(q)))
        return plain + composite

    def _plain_modified(self, node):
        return sorted(q for q in node._dfc_modified if not analysis.is_composite(q))

    def _undefined_inits(self, node):
        out = []
        for name in self._plain_modified(node):
            if name not in node._dfc_defined_in:
                self.maybe_undefined.add(name)
                out.extend(templates.replace("name = ag__.Undefined(label)",
                                             name=name, label=templates.const(name)))
        return out

    def _state_functions(self, state):
        get_name = self.ctx.namer.new("get_state")
        set_name = self.ctx.namer.new("set_state")
        vars_name = self.ctx.namer.new("vars_")
        loads = []
        for qn in state:
            if analysis.is_composite(qn):
                loads.append(templates.replace_as_expression(
                    "ag__.ld_or_undefined(lambda: target, label)",
                    target=_parse_qn(qn), label=templates.const(qn)))
            else:
                loads.append(templates.name(qn))
        plain = [q for q in state if not analysis.is_composite(q)]
        sets = []
        if plain:
            target = gast.Tuple(elts=[templates.name(q, gast.Store()) for q in plain], ctx=gast.Store())
            value = templates.name(vars_name)
            if plain != state[:len(plain)]:
                value = templates.replace_as_expression(
                    "(" + "".join(f"vars_[{state.index(q)}], " for q in plain) + ")", vars_=vars_name)
            elif len(plain) < len(state):
                value = templates.replace_as_expression(f"vars_[:{len(plain)}]", vars_=vars_name)
            sets.append(gast.Assign(targets=[target], value=value, type_comment=None))
        for i, qn in enumerate(state):
            if analysis.is_composite(qn):
                # an undefined entry is removed, so the next branch starts without it
                target = _parse_qn(qn)
                is_attr = isinstance(target, gast.Attribute)
                key = target.attr if is_attr else target.slice.value
                sets.extend(templates.replace(f"""
                    if not ag__.is_undefined(vars_[{i}]):
                        target = vars_[{i}]
                    else:
                        ag__.unset(lambda: parent, key, is_attr)
                """, vars_=vars_name, target=target, parent=target.value,
                    key=templates.const(key), is_attr=templates.const(is_attr)))
        if not sets:
            sets = [gast.Pass()]
        stmts = templates.replace("""
            def get_name():
                return state
            def set_name(vars_):
                global globals_
                nonlocal plain
                sets
        """, get_name=get_name, set_name=set_name, vars_=vars_name, sets=sets,
            globals_=[q for q in plain if q in self.globals[-1]],
            plain=[q for q in plain if q not in self.globals[-1]],
            state=gast.Tuple(elts=loads, ctx=gast.Load()))
        stmts[0]._dfc_state_function = True
        return stmts, get_name, set_name

    def _def(self, base, body, nonlocals, args=()):
        name = self.ctx.namer.new(base)
        params = ", ".join(args)
        stmts = templates.replace(f"""
            def fn_name({params}):
                global globals_
                nonlocal names
                body
        """, fn_name=name, body=body or [gast.Pass()],
            globals_=[q for q in nonlocals if q in self.globals[-1]],
            names=[q for q in nonlocals if q not in self.globals[-1]])
        return stmts, name

    def _opts(self, node, state):
        lists = set()
        for n in gast.walk(node):
            qn = getattr(n, "_dfc_list_append", None)
            if qn is not None and qn in state:
                lists.add(qn)
        if not lists:
            return templates.const(None)
        return gast.Dict(keys=[templates.const("lists")], values=[templates.str_tuple(sorted(lists))])

    # ------------------------------------------------------------ try
    def visit_FunctionDef(self, node):
        saved, self.try_depth = self.try_depth, 0
        self.globals.append(analysis.declared(node)["global"])
        self.generic_visit(node)
        self.globals.pop()
        self.try_depth = saved
        return node

    def visit_Try(self, node):
        self.try_depth += 1
        node.body = self.visit_block(node.body)
        self.try_depth -= 1
        node.handlers = self.visit_block(node.handlers)
        node.orelse = self.visit_block(node.orelse)
        node.finalbody = self.visit_block(node.finalbody)
        return node

    def _outside_try(self, value, kind):
        """value, checked at trace time when it decides a statement inside a `try` body:
        the errors of an in-graph cond/loop happen at run time, out of the `except`'s reach."""
        if not self.try_depth:
            return value
        return templates.replace_as_expression("ag__.not_tensor_in_try(value, kind)",
                                               value=value, kind=templates.const(kind))

    # ------------------------------------------------------------ if
    def visit_If(self, node):
        self.generic_visit(node)
        outputs = self._state(node, node._dfc_live_out)
        # Variables a branch reads before writing that are dead after the `if` are state too
        # (not outputs): each traced branch must start from the values before the `if`.
        inputs = [q for q in self._plain_modified(node)
                  if q in node._dfc_live_in and q not in outputs]
        state = outputs + inputs
        nonlocals = self._plain_modified(node)
        out = self._undefined_inits(node)
        fns, get_name, set_name = self._state_functions(state)
        out.extend(fns)
        body_def, body_name = self._def("if_body", node.body, nonlocals)
        out.extend(body_def)
        else_name = None
        if node.orelse:
            else_def, else_name = self._def("else_body", node.orelse, nonlocals)
            out.extend(else_def)
        out.extend(templates.replace(
            "ag__.if_stmt(test, body, orelse, get_state, set_state, names, nouts)",
            test=self._outside_try(node.test, "if"), body=body_name,
            orelse=else_name if else_name else templates.const(None),
            get_state=get_name, set_state=set_name, names=templates.str_tuple(state),
            nouts=templates.const(len(outputs))))
        return self.mark(out, node)

    # ------------------------------------------------------------ while
    def _loop_prologue(self, node):
        """What a converted while and for start with: the loop's state, the plain names it modifies, the
        statements set before it (undefined initial values, the state's getter and setter)."""
        self.generic_visit(node)
        state = self._state(node, node._dfc_loop_live)
        nonlocals = self._plain_modified(node)
        out = self._undefined_inits(node)
        fns, get_name, set_name = self._state_functions(state)
        out.extend(fns)
        return state, nonlocals, out, get_name, set_name

    def visit_While(self, node):
        state, nonlocals, out, get_name, set_name = self._loop_prologue(node)
        test_name = self.ctx.namer.new("loop_test")
        out.extend(templates.replace("""
            def test_name():
                return test
        """, test_name=test_name, test=self._outside_try(node.test, "while")))
        body_def, body_name = self._def("loop_body", node.body, nonlocals)
        out.extend(body_def)
        out.extend(templates.replace(
            "ag__.while_stmt(test, body, get_state, set_state, names, opts)",
            test=test_name, body=body_name, get_state=get_name, set_state=set_name,
            names=templates.str_tuple(state), opts=self._opts(node, state)))
        return self.mark(out, node)

    # ------------------------------------------------------------ for
    def visit_For(self, node):
        state, nonlocals, out, get_name, set_name = self._loop_prologue(node)
        extra_name = None
        flags = getattr(node, "_dfc_extra_flags", [])
        if flags:
            extra_name = self.ctx.namer.new("extra_test")
            test = templates.replace_as_expression(
                "ag__.and_(" + ", ".join(f"lambda: ag__.not_({f})" for f in flags) + ")"
                if len(flags) > 1 else f"ag__.not_({flags[0]})")
            out.extend(templates.replace("""
                def extra_name():
                    return test
            """, extra_name=extra_name, test=test))
        itr = self.ctx.namer.new("itr")
        bind = templates.replace("target = itr", target=node.target, itr=itr)
        self.mark(bind, node)
        body_def, body_name = self._def("loop_body", bind + node.body, nonlocals, args=(itr,))
        out.extend(body_def)
        out.extend(templates.replace(
            "ag__.for_stmt(iter_, extra, body, get_state, set_state, names, opts)",
            iter_=self._outside_try(node.iter, "for"), extra=extra_name if extra_name else templates.const(None),
            body=body_name, get_state=get_name, set_state=set_name,
            names=templates.str_tuple(state), opts=self._opts(node, state)))
        return self.mark(out, node)


def _parse_qn(qn):
    return gast.parse(qn).body[0].value


class _WrapLoads(gast.NodeTransformer):
    """`x` -> `ag__.ld(x)` for variables that may be undefined (outside get_state)."""

    def __init__(self, names):
        self.names = names

    def visit_FunctionDef(self, node):
        if getattr(node, "_dfc_state_function", False):
            return node
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) \
                and func.value.id == "ag__" and func.attr == "Undefined":
            return node
        self.generic_visit(node)
        return node

    def visit_Name(self, node):
        if node.id in self.names and isinstance(node.ctx, gast.Load):
            new = templates.replace_as_expression("ag__.ld(name)", name=node.id)
            origin = getattr(node, "_dfc_origin", None)
            if origin is not None:
                for n in gast.walk(new):
                    n._dfc_origin = origin
            return new
        return node
