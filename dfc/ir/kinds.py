"""The kinds of node every runtime path tells apart, numbered once.

The op registry names the primitive an op is (OpDef.kind: "normal", "switch", "merge", "enter",
"exit", "next_iteration"); the executor, the fused and compiled loops and the reference interpreter
work with these numbers. SEND, RECV and ASYNC are the executor's own: a Send or Recv across
partitions, and an op whose kernel completes later (OpDef.async_kernel).
"""
NORMAL, SWITCH, MERGE, ENTER, EXIT, NEXT, SEND, RECV, ASYNC = range(9)

OF_PRIMITIVE = {"normal": NORMAL, "switch": SWITCH, "merge": MERGE, "enter": ENTER, "exit": EXIT,
                "next_iteration": NEXT}
