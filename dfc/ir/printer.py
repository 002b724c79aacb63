"""One line per node: `%mul_3 = Mul(%x, %w) : float32[3] @cpu:0 [frame=while_1]`."""
import os

from dfc.ir.graph import ROOT_FRAME, parse_input


def _ref(r):
    name, port, ctrl = parse_input(r)
    if ctrl:
        return f"^%{name}"
    return f"%{name}" if port == 0 else f"%{name}:{port}"


def _attr(v):
    if hasattr(v, "dtype") and hasattr(v, "shape"):
        return repr(v.tolist()) if v.size <= 4 else f"<{v.dtype}{list(v.shape)}>"
    return repr(v)


def source_location(n):
    """'z @ file.py:12': the user's variable and file:line that built node n (as known), or ''."""
    loc = os.path.basename(n.loc) if n.loc else ""
    var = getattr(n, "var", None)
    if var and loc:
        return f"{var} @ {loc}"
    return var or loc


def graph_text(g):
    try:
        types = g.infer_types()
    except Exception:
        types = {}
    frame_of, _ = g.frames()
    lines = []
    for i in g.signature.get("inputs", []):
        lines.append(f"# input {i['name']}: {i['dtype']}{i.get('shape')}")
    for n in g.nodes.values():
        attrs = ", ".join(f"{k}={_attr(v)}" for k, v in sorted(n.attrs.items()))
        args = ", ".join(_ref(r) for r in n.inputs)
        line = f"%{n.name} = {n.op}({args})"
        if attrs:
            line += " {" + attrs + "}"
        ts = types.get(n.name)
        if ts:
            line += " : " + ", ".join(repr(t) for t in ts)
        if n.device:
            line += f" @{n.device}"
        if frame_of.get(n.name, ROOT_FRAME) != ROOT_FRAME:
            line += f" [frame={frame_of[n.name]}]"
        where = source_location(n)
        if where:
            line += f"  # {where}"
        lines.append(line)
    outs = g.signature.get("outputs")
    lines.append(f"# outputs {outs}")
    return "\n".join(lines)
