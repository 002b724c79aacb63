"""Wire compression on a training sample: samples/distributed_training.py's digits classifier, 1 ps + 2 workers,
80 steps each, async and sync, with and without Session(wire_compression="bfloat16"): test accuracy and bytes
between processes per worker step.    python -m benchmarks.wire_compression
"""
import sys, importlib.util, numpy as np, dfc
spec = importlib.util.spec_from_file_location("dt", __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "samples", "distributed_training.py")); dt = importlib.util.module_from_spec(spec); spec.loader.exec_module(dt)
data = dt.load()
c = dfc.cluster.connect(tasks={"ps": 1, "worker": 2}, log_to_driver=False)
for comp in (None, "bfloat16"):
    for mode in ("async", "sync"):
        dp = dfc.train.DataParallel(c, dfc.train.SGD(0.5), mode=mode, wire_compression=comp, name=f"dp_{mode}_{comp}")
        w, b, loss = dt.model(dp)
        dp.compile(loss, [dfc.TensorSpec([None, 64], "float32"), dfc.TensorSpec([None], "int64")])
        n = 2; shards = [(data[0][k::n], data[1][k::n]) for k in range(n)]
        out = dp.run(shards, 80, batch_size=64)
        steps = sum(out["worker_steps"])
        print(mode, comp, "acc", round(dt.accuracy(w, b, data[2], data[3]), 4), "bytes/worker-step", round(out["bytes_between_processes"] / steps), flush=True)
c.shutdown()
