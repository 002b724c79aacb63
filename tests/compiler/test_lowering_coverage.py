"""Every op that can run inside a loop frame has a compiled lowering (dfc/runtime/kernels/*_lower.py), beside
test_ops.py's check that every op has a kernel; the few without one are listed with their reason
(codegen.NOT_LOWERED), and a frame that holds one says so, naming the node and the reason."""
import pytest

import dfc
from dfc.ir import ops as opreg

pytest.importorskip("numba")


def _tables():
    from dfc.runtime.compiled.codegen import NOT_LOWERED
    from dfc.runtime.kernels.lowering import LOWERINGS
    return LOWERINGS, NOT_LOWERED


def test_every_op_has_a_lowering_or_a_reason_for_none():
    lowerings, not_lowered = _tables()
    # Enter, Exit, Switch, Merge and NextIteration are the frame's structure: codegen writes them itself
    structure = {name for name, op in opreg.REGISTRY.items() if op.in_executor} - {"Send", "Recv"}
    assert structure == {"Enter", "Exit", "Switch", "Merge", "NextIteration"}
    missing = sorted(set(opreg.REGISTRY) - set(lowerings) - set(not_lowered) - structure)
    assert missing == [], f"ops with neither a lowering nor a reason in codegen.NOT_LOWERED: {missing}"
    assert sorted(set(lowerings) & set(not_lowered)) == []
    assert sorted(set(not_lowered) - set(opreg.REGISTRY)) == []
    assert all(isinstance(why, str) and len(why) > 20 for why in not_lowered.values())


def test_the_ops_without_a_lowering_are_asynchronous_cross_device_or_host_effects():
    """The table stays short: a new entry is a decision, made here."""
    _, not_lowered = _tables()
    queues = {"QueueHandle", "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue", "QueueDequeueMany", "QueueSize",
              "QueueClose"}
    accumulators = {"AccumulatorHandle", "AccumulatorApplyGradient", "AccumulatorTakeGradient",
                    "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep"}
    cross_device = {"Send", "Recv"}
    host = {"Print", "Save", "Restore", "SummaryScalar", "SummaryHistogram", "Progress"}
    outside = {"Placeholder", "VarHandle", "TensorArrayGrad", "ApplyOnce"}
    sparse_updates = {"ResourceScatterAdd", "ResourceScatterSub", "SumDuplicates", "DynamicPartition", "DynamicStitch"}
    assert set(not_lowered) == queues | accumulators | cross_device | host | outside | sparse_updates


def test_a_frame_that_cannot_compile_names_its_node_and_the_reason(tmp_path):
    """Session.compiled_frames() and `dfc show --fused` name the blocking node and why (no compile: the
    source is only generated)."""
    from click.testing import CliRunner

    from dfc.cli import main

    def f(x, n):
        def body(i, s):
            dfc.print("step", i)
            return i + 1, s + dfc.reduce_sum(x[:, None] * x)
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([], "float64")))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    (info,) = dfc.Session(g, compile_loops=True).compiled_frames().values()
    printer = [n.name for n in g.nodes.values() if n.op == "Print"][0]
    assert info["status"] == "fused" and info["blocked_by"] == printer
    assert "op Print has no lowering" in info["reason"] and "writes to the host" in info["reason"]
    from dfc.ir.serialize import save
    path = tmp_path / "g.json"
    save(g, str(path))
    r = CliRunner().invoke(main, ["show", str(path), "--fused"])
    assert r.exit_code == 0, r.output
    assert f"blocked by {printer} (Print): op Print has no lowering (it writes to the host" in r.output

    def h(x, n):        # the same loop without the print compiles (x[:, None] included)
        def body(i, s):
            return i + 1, s + dfc.reduce_sum(x[:, None] * x)
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([], "float64")))[1]
    g = dfc.trace(h, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    (info,) = dfc.Session(g, compile_loops=True).compiled_frames().values()
    assert (info["status"], info["blocked_by"]) == ("compiled", None)
