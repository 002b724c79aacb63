"""Which of the user's variables each graph node computes (Node.var), for `dfc show` and `dfc viz`.

Conversion records, per user function, the line of every statement and the
targets of every assignment (`z = ...`, `i, f, o, g = ...`, `t += 1`). After a
trace, the last node built by one execution of an assignment line is the value
assigned (Python evaluates the right-hand side's outermost operation last), so it
gets the target's name. The control-flow nodes of a loop or cond variable
(Enter, Merge, Switch, the body Identity, NextIteration, Exit) then take the
name of the value they carry. Placeholders are named after their parameter.
A node keeps no name when none is known; names never change what runs.
"""
import gast

from dfc.compiler.autograph import origin

# (file, line) of an assignment statement -> its targets as text
ASSIGNMENTS = {}
# (file, line) of any statement -> (file, line) of the user function it belongs to
LINE_OWNER = {}

_NESTED = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)


def record_function(node):
    """Record the statements of a parsed user function (its nodes carry origins)."""
    key = origin.get_origin(node)
    if key is None:
        return
    for where in [w for w, owner in LINE_OWNER.items() if owner == key]:   # an edited, reloaded file
        del LINE_OWNER[where]
        ASSIGNMENTS.pop(where, None)
    stack = list(getattr(node, "body", []) if isinstance(node.body, list) else [])
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, _NESTED) or not isinstance(stmt, gast.stmt):
            continue
        where = origin.get_origin(stmt)
        if where is not None:
            LINE_OWNER[where] = key
            text = _targets(stmt)
            if text:
                ASSIGNMENTS[where] = text
        for field in ("body", "orelse", "finalbody", "handlers"):
            stack.extend(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            stack.extend(handler.body)


def _targets(stmt):
    if isinstance(stmt, gast.Assign):
        if isinstance(stmt.value, (gast.Tuple, gast.List)) and any(
                isinstance(t, (gast.Tuple, gast.List)) for t in stmt.targets):
            return None     # `a, b = x, y`: which node is which is not known
        texts = [_target(t) for t in stmt.targets]
        return texts[0] if texts and all(texts) else None
    if isinstance(stmt, (gast.AugAssign, gast.AnnAssign)) and getattr(stmt, "value", None) is not None:
        return _target(stmt.target)
    return None


def _target(t):
    if isinstance(t, gast.Name):
        return t.id
    if isinstance(t, gast.Attribute):
        base = _target(t.value)
        return f"{base}.{t.attr}" if base else None
    if isinstance(t, (gast.Tuple, gast.List)):
        parts = [_target(e) for e in t.elts]
        return ", ".join(parts) if all(parts) else None
    if isinstance(t, gast.Starred):
        inner = _target(t.value)
        return f"*{inner}" if inner else None
    return None


def _where(loc):
    if not loc:
        return None
    filename, _, line = loc.rpartition(":")
    return (filename, int(line)) if line.isdigit() else None


def label(graph):
    """Set Node.var on the nodes of a traced graph whose user variable is known."""
    nodes = list(graph.nodes.values())
    for spec in graph.signature.get("inputs", []):
        n = graph.nodes.get(spec.get("node"))
        if n is not None and n.var is None:
            n.var = spec.get("name")
    _label_assignments(nodes)
    for _ in range(8):       # a value flows through a cond Merge into NextIteration, and so on
        before = [n.var for n in nodes]
        _label_control_flow(graph, nodes)
        if [n.var for n in nodes] == before:
            break


def _label_assignments(nodes):
    runs = {}     # function -> [assignment line, last node built on it]

    def finish(key):
        line, node = runs.pop(key)
        if node.var is None:
            node.var = ASSIGNMENTS[line]

    for n in nodes:
        where = _where(n.loc)
        key = LINE_OWNER.get(where) if where is not None else None
        if key is None:
            continue
        run = runs.get(key)
        if run is not None and run[0] != where:
            finish(key)
        if where in ASSIGNMENTS:
            runs[key] = [where, n]
    for key in list(runs):
        finish(key)


def _source(graph, ref):
    name = ref.split(":")[0] if not ref.startswith("^") else None
    return graph.nodes.get(name) if name else None


def _label_control_flow(graph, nodes):
    for n in nodes:                      # NextIteration: the value the body computed
        if n.op == "NextIteration" and n.var is None and n.data_inputs:
            src = _source(graph, n.data_inputs[0])
            n.var = src.var if src is not None else None
    for n in nodes:                      # a loop's Merge and Enter: the variable it carries
        if n.op != "Merge":
            continue
        srcs = [_source(graph, r) for r in n.data_inputs]
        nexts = [s for s in srcs if s is not None and s.op == "NextIteration"]
        if not nexts:
            continue
        if n.var is None:
            n.var = next((s.var for s in nexts if s.var), None)
        for s in srcs:
            if s is not None and s.op == "Enter" and n.var:
                s.var = n.var
    for n in nodes:                      # the rest take their (first named) data input's
        if n.var is None and n.op in ("Enter", "Merge", "Switch", "Identity", "Exit"):
            for ref in n.data_inputs:
                src = _source(graph, ref)
                if src is not None and src.var:
                    n.var = src.var
                    break
