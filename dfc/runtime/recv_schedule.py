"""Scheduling of Recvs (whitepaper §5.2): each Recv starts as late as its consumers allow.

A Recv of the root frame has no inputs, so it would start when the run starts and hold its value on the
receiving device from the moment the Send delivers it until its last consumer ran: a large tensor sent
early but used late occupies the receiver's memory the whole time. `delay_recvs` gives each Recv a control
input on every value all of its consumers wait for anyway (their other inputs on the same device and in
the same frame), so it starts only when its consumers could otherwise run, and the value is taken out of the
rendezvous then (it waits there, where the Send left it). A consumer is never delayed by this beyond the
inputs it already waits for.

Not delayed: a Recv with a consumer that moves values between frames (Merge, Switch, Enter, Exit,
NextIteration) or talks to another device (Send), and control tokens. A control input is added only when
the Recv does not already lead to its source (through any device, Send to Recv, ignoring a loop's back
edges), so no cycle, and no deadlock, can form; a Recv runs even when a control input is dead (§4.4), so
deadness is unchanged.
"""
from dfc.ir import ops as opreg
from dfc.ir.graph import parse_input


def delay_recvs(graph):
    """Add the control inputs that delay each Recv of `graph` (a whole partitioned graph: every device's
    nodes with their Send/Recv pairs). Returns the number of control inputs added."""
    frame_of, parent = graph.frames()
    nodes = graph.nodes
    succ = {name: [] for name in nodes}
    consumers = {name: [] for name in nodes}
    send_of = {}
    for n in nodes.values():
        for ref in n.inputs:
            src, _, ctrl = parse_input(ref)
            if nodes[src].op != "NextIteration":        # a loop's back edge goes to the next iteration
                succ[src].append(n.name)
            if not ctrl:
                consumers[src].append(n)
        if n.op == "Send":
            send_of[_xfer_key(n)] = n.name
    for n in nodes.values():            # a Send leads to its Recv
        if n.op == "Recv" and _xfer_key(n) in send_of:
            succ[send_of[_xfer_key(n)]].append(n.name)
    added = 0
    for r in [n for n in nodes.values() if n.op == "Recv"]:
        sources = _waited_for(graph, r, consumers[r.name], frame_of, parent)
        if not sources:
            continue
        after = _descendants(succ, r.name)
        for s in sources:
            if s not in after:
                graph.add_control_input(r.name, s)
                succ[s].append(r.name)
                added += 1
    return added


def _xfer_key(n):
    a = n.attrs
    return a["tensor_name"], a["send_device"], a["recv_device"]


def _waited_for(graph, r, users, frame_of, parent):
    """The nodes every consumer of Recv r waits for anyway: their other inputs on r's device, whose values
    live in r's frame (in graph order)."""
    if not users or r.attrs["tensor_name"].startswith("^"):
        return []
    common = None
    for c in users:
        opdef = opreg.get(c.op)
        if opdef.kind != "normal" or opdef.in_executor:
            return []
        mine = []
        for ref in c.inputs:
            src = parse_input(ref)[0]
            s = graph.nodes[src]
            if src == r.name or s.device != r.device or s.op == "NextIteration":
                continue
            out_frame = parent[frame_of[src]] if s.op == "Exit" else frame_of[src]
            if out_frame == frame_of[r.name]:
                mine.append(src)
        common = mine if common is None else [s for s in common if s in mine]
    return list(dict.fromkeys(common))


def _descendants(succ, start):
    seen, stack = {start}, [start]
    while stack:
        for m in succ[stack.pop()]:
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen
