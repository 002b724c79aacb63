"""Static analyses on a (lowered) function body: activity, liveness, reaching
definitions. Results are stored on the If/While/For nodes they describe:

  node._dfc_modified   QNs written anywhere in the statement (not in nested defs)
  node._dfc_live_out   QNs live right after the statement
  node._dfc_live_in    (if) QNs live right before the statement

Variables that nested functions and lambdas read are live everywhere they
have a value (see `captured`): a closure may be called at any point.
  node._dfc_loop_live  (loops) QNs live at the loop head
  node._dfc_defined_in names possibly defined before the statement

A QN ("qualified name") is a string: a plain name `x`, an attribute chain
`self.a.b`, or a constant subscript `d['k']`. Composite QNs are tracked so
attributes and dict entries can be loop variables and branch outputs.
"""
import gast

_COMPOUND = (gast.If, gast.While, gast.For)


# ---------------------------------------------------------------- QNs
def qn_of(node):
    """The QN of a Name/Attribute/constant Subscript chain, else None."""
    if isinstance(node, gast.Name):
        return node.id
    if isinstance(node, gast.Attribute):
        base = qn_of(node.value)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, gast.Subscript) and isinstance(node.slice, gast.Constant):
        key = node.slice.value
        if isinstance(key, (str, int)) and not isinstance(key, bool):
            base = qn_of(node.value)
            return None if base is None else f"{base}[{key!r}]"
    return None


def is_composite(qn):
    return not qn.isidentifier()


def base_name(qn):
    for i, ch in enumerate(qn):
        if ch in ".[":
            return qn[:i]
    return qn


def qn_parents(qn):
    """'a.b[1].c' -> ['a', 'a.b', "a.b[1]"]."""
    out, depth = [], 0
    for i, ch in enumerate(qn):
        if ch == "[":
            if depth == 0:
                out.append(qn[:i])
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "." and depth == 0:
            out.append(qn[:i])
    return out


# ---------------------------------------------------------------- activity
class Activity(gast.NodeVisitor):
    """Reads and writes of one statement or expression (nested defs: free reads)."""

    def __init__(self):
        self.reads, self.writes = set(), set()
        self.scope_decls = set()  # names declared global/nonlocal

    def visit_Name(self, node):
        if isinstance(node.ctx, gast.Load):
            self.reads.add(node.id)
        elif isinstance(node.ctx, (gast.Store, gast.Del)):
            self.writes.add(node.id)

    def _visit_chain(self, node):
        qn = qn_of(node)
        if isinstance(node.ctx, gast.Load):
            if qn is not None:
                self.reads.add(qn)
                self.reads.update(qn_parents(qn))
                return
        elif qn is not None:
            self.writes.add(qn)
            self.reads.update(qn_parents(qn))
            return
        self.visit(node.value)
        if isinstance(node, gast.Subscript):
            self.visit(node.slice)

    visit_Attribute = _visit_chain
    visit_Subscript = _visit_chain

    def visit_AugAssign(self, node):
        qn = qn_of(node.target)
        if qn is not None:
            self.reads.add(qn)
        self.visit(node.target)
        self.visit(node.value)

    def visit_FunctionDef(self, node):
        self.writes.add(node.name)
        for d in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(d)
        self.reads.update(free_reads(node))

    def visit_Lambda(self, node):
        for d in node.args.defaults:
            self.visit(d)
        self.reads.update(free_reads(node))

    def visit_ClassDef(self, node):
        self.writes.add(node.name)
        for d in node.decorator_list + node.bases:
            self.visit(d)

    def _visit_comprehension(self, node):
        self.reads.update(free_reads(node))

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension

    def visit_Global(self, node):
        self.scope_decls.update(node.names)

    visit_Nonlocal = visit_Global


def activity(nodes):
    act = Activity()
    for node in nodes if isinstance(nodes, list) else [nodes]:
        if node is not None:
            act.visit(node)
    return act


def reads(node):
    return activity(node).reads if node is not None else set()


def writes(nodes):
    return activity(nodes).writes


def free_reads(fn_node):
    """Names a nested function / lambda / comprehension reads from outside."""
    loads, stores = set(), set()
    for node in gast.walk(fn_node):
        if isinstance(node, gast.Name):
            (loads if isinstance(node.ctx, gast.Load) else stores).add(node.id)
        elif isinstance(node, (gast.FunctionDef, gast.ClassDef)) and node is not fn_node:
            stores.add(node.name)
    declared = set()
    for node in gast.walk(fn_node):
        if isinstance(node, (gast.Global, gast.Nonlocal)):
            declared.update(node.names)
    return loads - (stores - declared)


# ---------------------------------------------------------------- liveness
def _loop_extra_reads(node):
    return set(getattr(node, "_dfc_extra_flags", ()))


def live_block(stmts, live_out):
    live = set(live_out)
    for stmt in reversed(stmts):
        live = live_stmt(stmt, live)
    return live


def live_stmt(node, live_out):
    if isinstance(node, gast.If):
        node._dfc_live_out = set(live_out)
        node._dfc_live_in = (reads(node.test) | live_block(node.body, live_out)
                             | live_block(node.orelse, live_out))
        return node._dfc_live_in
    if isinstance(node, gast.While):
        node._dfc_live_out = set(live_out)
        head = set(live_out) | reads(node.test) | live_block(node.orelse, live_out)
        while True:
            new = head | live_block(node.body, head)
            if new == head:
                break
            head = new
        node._dfc_loop_live = head
        return head
    if isinstance(node, gast.For):
        node._dfc_live_out = set(live_out)
        targets = writes(node.target)
        head = set(live_out) | live_block(node.orelse, live_out) | _loop_extra_reads(node)
        while True:
            new = head | (live_block(node.body, head) - targets)
            if new == head:
                break
            head = new
        node._dfc_loop_live = head
        return head | reads(node.iter)
    if isinstance(node, gast.With):
        body = live_block(node.body, live_out)
        return reads(node.items) | (body - writes([i.optional_vars for i in node.items if i.optional_vars]))
    if isinstance(node, gast.Try):
        inner = live_block(node.finalbody, live_out)
        handlers = set()
        for h in node.handlers:
            handlers |= live_block(h.body, inner)
        body = live_block(node.body + node.orelse, inner)
        return body | handlers | inner
    if isinstance(node, gast.Return):
        return reads(node.value)
    if isinstance(node, (gast.Raise,)):
        return reads(node)
    act = activity(node)
    return act.reads | (set(live_out) - act.writes)


# ---------------------------------------------------------------- reaching definitions
def defined_block(stmts, defined):
    for stmt in stmts:
        defined = defined_stmt(stmt, defined)
    return defined


def defined_stmt(node, defined):
    if isinstance(node, gast.If):
        node._dfc_defined_in = set(defined)
        return defined_block(node.body, defined) | defined_block(node.orelse, defined)
    if isinstance(node, (gast.While, gast.For)):
        node._dfc_defined_in = set(defined)
        loop = set(defined) | writes(node.body)
        if isinstance(node, gast.For):
            loop |= writes(node.target)
        loop = defined_block(node.body, loop)
        return defined_block(node.orelse, loop)
    if isinstance(node, gast.With):
        return defined_block(node.body, defined | writes([i.optional_vars for i in node.items if i.optional_vars]))
    if isinstance(node, gast.Try):
        d = defined_block(node.body + node.orelse, defined)
        for h in node.handlers:
            d = defined_block(h.body, d | ({h.name.id} if isinstance(h.name, gast.Name) else set()))
        return defined_block(node.finalbody, d)
    return defined | writes(node)


# ---------------------------------------------------------------- driver
def modified(node):
    """QNs a compound statement writes (targets of a for included)."""
    out = writes(node.body + node.orelse)
    if isinstance(node, gast.For):
        out |= writes(node.target)
    return out


def declared(fn_node):
    """The names fn_node declares `global` and `nonlocal` (not those of nested functions)."""
    out = {"global": set(), "nonlocal": set()}
    todo = list(fn_node.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (gast.Global, gast.Nonlocal)):
            out[type(node).__name__.lower()].update(node.names)
        elif not isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            todo.extend(gast.iter_child_nodes(node))
    return out


def param_names(fn_node):
    args = fn_node.args
    names = [a.id for a in args.posonlyargs + args.args + args.kwonlyargs]
    for a in (args.vararg, args.kwarg):
        if a is not None:
            names.append(a.id)
    return names


def analyze_function(fn_node):
    """Annotate every If/While/For in fn_node (and in nested functions)."""
    _analyze_scope(fn_node)
    for node in gast.walk(fn_node):
        if isinstance(node, _COMPOUND):
            node._dfc_modified = modified(node)
        elif isinstance(node, gast.FunctionDef) and node is not fn_node:
            _analyze_scope(node)


def _analyze_scope(fn_node):
    """Liveness and reaching definitions of one function's body. Its global and nonlocal names
    have a value when it starts and are read after it ends, by whoever reads that variable."""
    body = fn_node.body if isinstance(fn_node.body, list) else []
    outside = set().union(*declared(fn_node).values())
    live_block(body, outside)
    defined_block(body, set(param_names(fn_node)) | outside)
    _add_captured(fn_node, outside)


# ---------------------------------------------------------------- closures
# Helpers whose lambda arguments the converters made: they run at once, so what they read is
# read right there (liveness already counts it), unlike a closure that may run at any later call.
_IMMEDIATE = {"and_", "or_", "if_exp", "compare_chain", "assert_stmt"}


def captured(fn_node):
    """The variables that functions and lambdas nested in fn_node read from it."""
    out = set()
    for closure in _closures(fn_node.body):
        out |= free_reads(closure)
    return out


def _closures(nodes):
    for node in nodes:
        if isinstance(node, (gast.FunctionDef, gast.Lambda)):
            yield node
            continue
        if isinstance(node, gast.ClassDef):
            continue
        children = list(gast.iter_child_nodes(node))
        if _is_immediate_call(node):  # look inside the converter's lambdas, not at them
            children = [c.body if isinstance(c, gast.Lambda) else c for c in children]
            children = [e.body if isinstance(e, gast.Lambda) else e for c in children
                        for e in (c.elts if isinstance(c, gast.Tuple) else [c])]
        yield from _closures(children)


def _is_immediate_call(node):
    func = getattr(node, "func", None) if isinstance(node, gast.Call) else None
    return (isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name)
            and func.value.id == "ag__" and func.attr in _IMMEDIATE)


def _add_captured(fn_node, outside=frozenset()):
    """A variable a closure reads is read whenever the closure is called, which the statement
    order does not show: it is live everywhere it has a value (an output of the ifs and loops
    that change it) and each branch of an `if` starts from its value before the `if`. So is a
    global or nonlocal name (`outside`): code outside the function may read it at any time."""
    names = captured(fn_node) | set(outside)
    if not names:
        return
    todo = list(fn_node.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            continue
        todo.extend(gast.iter_child_nodes(node))
        before = getattr(node, "_dfc_defined_in", set())
        if isinstance(node, gast.If) and hasattr(node, "_dfc_live_in"):
            node._dfc_live_in |= names
            node._dfc_live_out |= names & before
        elif isinstance(node, (gast.While, gast.For)) and hasattr(node, "_dfc_loop_live"):
            node._dfc_loop_live |= names & before
