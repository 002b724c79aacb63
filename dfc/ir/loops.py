"""The loop skeleton of Figure 4, built in one place.

For each loop variable v of a frame:

    Enter(v) -> Merge(Enter, NextIteration) -> Switch(Merge, LoopCond)
    Switch:1 -> Identity          the value an iteration sees (the body's input)
    body -> NextIteration         the back edge into the Merge
    Switch:0 -> Exit              the value after the loop

dfc.while_loop, its gradient loop, the iteration counter that gradients add to
a forward loop, and the partitioner's control-loop state machines (§4.4,
Figure 6) all build this skeleton with a LoopBuilder. Nodes are added through
a `make` callback, so the compiler (symbolic Tensors in control contexts) and
the runtime partitioner (plain "node:port" refs) keep their own ways of naming
and placing nodes and of holding values.
"""
from dfc.ir.graph import parse_input


def _ref_of(value):
    return value.ref


class LoopBuilder:
    """The variables of one loop frame, built in the order Figure 4 needs them:

        lb = LoopBuilder(graph, make, "while", parallel_iterations=32)
        inside = [lb.enter(v, ttype) for v in inits]    # Enter + Merge; the condition reads these
        body_in = lb.iterate(lb.loop_cond(pred))        # Switch + Identity; the body reads these
        lb.close(body_out)                              # NextIteration: the back edges
        after = lb.exit_all()                           # Exit: the values after the loop

    make(op, inputs, attrs, role, ttype) adds one node and returns its outputs as a list;
    `role` ("enter", "merge", "loop_cond", "switch", "body", "next", "exit") tells the caller
    how to name and place it; `ttype` is the declared type of a Merge, None elsewhere.
    ref(value) is the "node:port" of an output make returned.
    """

    def __init__(self, graph, make, frame_name, parallel_iterations, ref=_ref_of):
        self.graph, self.make, self.ref = graph, make, ref
        self.frame_name, self.parallel_iterations = frame_name, parallel_iterations
        self.enters, self.merges, self.switches, self.identities = [], [], [], []
        self.next_iterations, self.exits = [], []

    def enter(self, value, ttype=None):
        """Bring `value` into the frame as a loop variable; return its Merge (open until close)."""
        e = self.make("Enter", [value], {"frame_name": self.frame_name, "is_constant": False,
                                         "parallel_iterations": self.parallel_iterations},
                      "enter", None)[0]
        # Both inputs are the Enter until close() turns input 1 into the back edge.
        m = self.make("Merge", [e, e], {}, "merge", ttype)[0]
        self.enters.append(e)
        self.merges.append(m)
        return m

    def loop_cond(self, pred):
        """The LoopCond of the frame: the predicate every Switch of the frame reads."""
        return self.make("LoopCond", [pred], {}, "loop_cond", None)[0]

    def iterate(self, loop_cond):
        """A Switch on `loop_cond` and an Identity for each variable entered since the last call;
        return the Identities (the values one iteration sees)."""
        start = len(self.identities)
        for m in self.merges[start:]:
            sw = self.make("Switch", [m, loop_cond], {}, "switch", None)
            self.switches.append(sw)
            self.identities.append(self.make("Identity", [sw[1]], {}, "body", None)[0])
        return self.identities[start:]

    def close(self, values):
        """Feed `values` (one per variable, in entry order) to the next iteration."""
        if len(values) != len(self.merges):
            raise ValueError(f"loop {self.frame_name}: {len(values)} next values for "
                             f"{len(self.merges)} variables")
        for m, v in zip(self.merges, values):
            nx = self.make("NextIteration", [v], {}, "next", None)[0]
            self.next_iterations.append(nx)
            self.graph.set_input(parse_input(self.ref(m))[0], 1, self.ref(nx))
        return self.next_iterations

    def exit_all(self):
        """An Exit for each variable: its value once the loop condition is false."""
        for sw in self.switches[len(self.exits):]:
            self.exits.append(self.make("Exit", [sw[0]], {}, "exit", None)[0])
        return self.exits
