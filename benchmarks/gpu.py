"""GPU benchmarks: dfc on a CUDA GPU (cupy) against PyTorch and JAX on the same GPU, in one process each.

    python -m benchmarks.gpu lstm      [--device gpu:0] [--reps 10] [--json out.json]
    python -m benchmarks.gpu smallops  [--device gpu:0] [--reps 10] [--json out.json]
    python -m benchmarks.gpu fma       [--device gpu:0] [--json out.json]
    python -m benchmarks.gpu timeline  [--device gpu:0] [--out DIR]

`lstm`: the LSTM training step of benchmarks/lstm.py (forward while_loop, gradients of W and b through it)
at H in {512, 1024}, B in {64, 256}, T = 100, float32; dfc with and without elementwise fusion
(DFC_FUSE_ELEMENTWISE), PyTorch eager (a hand-written cell loop; nn.LSTM with cuDNN off; nn.LSTM with
cuDNN on) and JAX (jit of value_and_grad over lax.scan). Every system takes its inputs already on the
GPU and returns the gradients to the host each step (dfc's Session returns numpy arrays, so the others
copy theirs too). Kernel launches per step are counted by PyTorch's profiler (CUPTI sees every kernel
of the process, cupy's included) where PyTorch has CUDA; otherwise "n/a".
`smallops`: the small-op benchmark programs (trivial loop, adaptive ODE and its gradient, fixed point,
GRU step, HMC) on the device against JAX jit on the GPU.
`fma`: whether fusing elementwise chains (cupy.fuse, compiled by NVRTC, which contracts a*b+c into an
FMA by default) changes results against unfused cupy: max |difference| and the count of differing
elements on an elementwise chain and on the LSTM step.
`timeline`: Figure 13 — a swapping LSTM step recorded with Session(trace=...) (dfc's lanes) and, where
PyTorch has CUDA, by PyTorch's profiler (the GPU's own kernel and copy records per stream); prints how
long swap copies overlapped compute.
On a machine without a GPU, `--device strict:0` runs everything on dfc's strict cupy double (results,
not speed).
"""
import argparse
import json
import os
import statistics
import sys
import time

# JAX would otherwise take 75% of the GPU's memory at its first call, starving cupy (and PyTorch).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402

import dfc  # noqa: E402
from benchmarks import lstm as dfc_lstm  # noqa: E402
from benchmarks.harness import _flat  # noqa: E402
from benchmarks.lstm_problem import make_inputs, numpy_loss_and_grads, max_rel_error  # noqa: E402

LSTM_SIZES = [(512, 64), (512, 256), (1024, 64), (1024, 256)]


def device_module(device):
    """cupy for gpu:N, the strict double's module for strict:N."""
    from dfc.runtime.devices import GPUDevice, StrictDevice
    return (StrictDevice if device.startswith("strict") else GPUDevice).backend()


def timed(fn, reps, warmup=2):
    """(median ms, p25, p75, all) of fn() after `warmup` calls; fn must synchronize itself."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
    return {"median_ms": statistics.median(ts), "p25_ms": q[0], "p75_ms": q[2], "n": len(ts)}


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def count_launches(fn):
    """Kernel launches (and memcpys) of one call of fn, from PyTorch's CUPTI-based profiler; None without it."""
    torch = _torch_cuda()
    if torch is None:
        return None
    from torch.profiler import profile, ProfilerActivity
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = copies = 0
    for e in prof.events():
        if getattr(e, "device_type", None) is None or "CUDA" not in str(e.device_type):
            continue
        name = e.name.lower()
        if "memcpy" in name or "memset" in name:
            copies += 1
        else:
            kernels += 1
    return {"kernels": kernels, "copies": copies}


# ---------------------------------------------------------------- the LSTM training step

def _dfc_lstm(device, H, B, T, fuse):
    os.environ["DFC_FUSE_ELEMENTWISE"] = "1" if fuse else "0"     # read when the Session builds its plans
    xp = device_module(device)
    x, W, b = make_inputs(H, B, T)
    s = dfc.Session(dfc_lstm.build(H, B, T), default_device=device)
    dx, dW, db = xp.asarray(x), xp.asarray(W), xp.asarray(b)
    s.call(dx, dW, db)
    os.environ.pop("DFC_FUSE_ELEMENTWISE")
    return lambda: s.call(dx, dW, db)


def _torch_lstm(torch, H, B, T, kind):
    x, W, b = make_inputs(H, B, T)
    dev = torch.device("cuda")
    xt = torch.from_numpy(x).to(dev)
    if kind == "cells":
        Wt = torch.from_numpy(W).to(dev).requires_grad_()
        bt = torch.from_numpy(b).to(dev).requires_grad_()

        def step():
            Wt.grad = bt.grad = None
            h = c = torch.zeros(B, H, device=dev)
            loss = torch.zeros((), device=dev)
            for t in range(T):
                z = torch.cat([xt[t], h], 1) @ Wt + bt
                i, f, o = (torch.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))
                c = f * c + i * torch.tanh(z[:, 3 * H:])
                h = o * torch.tanh(c)
                loss = loss + h.sum()
            (loss + (h * h).sum()).backward()
            return Wt.grad.cpu().numpy(), bt.grad.cpu().numpy()
        return step
    lstm = torch.nn.LSTM(H, H).to(dev)
    cudnn = kind == "nn.LSTM cuDNN"

    def step():
        lstm.zero_grad(set_to_none=True)
        with torch.backends.cudnn.flags(enabled=cudnn):
            out, (h, _) = lstm(xt)
            (out.sum() + (h * h).sum()).backward()
        return [p.grad.cpu().numpy() for p in lstm.parameters()]
    return step


def _jax_lstm(H, B, T):
    import jax
    import jax.numpy as jnp
    x, W, b = make_inputs(H, B, T)

    def loss_fn(W, b, x):
        def step(carry, xt):
            h, c = carry
            z = jnp.concatenate([xt, h], 1) @ W + b
            i, f, o = (jax.nn.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))
            c = f * c + i * jnp.tanh(z[:, 3 * H:])
            h = o * jnp.tanh(c)
            return (h, c), h.sum()
        zeros = jnp.zeros((B, H), jnp.float32)
        (h, c), sums = jax.lax.scan(step, (zeros, zeros), x)
        return sums.sum() + (h * h).sum()
    g = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))
    dev = jax.devices()[0]
    jW, jb, jx = (jax.device_put(v, dev) for v in (W, b, x))

    def step():
        _, (dW, db) = g(jW, jb, jx)
        return np.asarray(dW), np.asarray(db)
    t = time.perf_counter()
    step()
    return step, time.perf_counter() - t, dev.platform


def bench_lstm(device, reps, T=100, sizes=LSTM_SIZES):
    torch = _torch_cuda()
    rows = []
    for H, B in sizes:
        row = {"H": H, "B": B, "T": T}
        x, W, b = make_inputs(H, B, T)
        ref = None
        if H * B <= 512 * 64:   # float64 numpy on the host (larger sizes: against JAX's gradients, below)
            _, ref_dW, ref_db = numpy_loss_and_grads(x.astype(np.float64), W.astype(np.float64), b.astype(np.float64))
            ref = (ref_dW, ref_db)
        systems, grads = {}, {}
        for fuse in (True, False):
            name = "dfc" + ("" if fuse else " (no elementwise fusion)")
            try:
                fn = _dfc_lstm(device, H, B, T, fuse)
                _, dW, db = fn()
                grads[name] = (dW, db)
                row[name + " launches"] = count_launches(fn)
                systems[name] = fn
            except Exception as e:  # noqa: BLE001 — recorded in the table, the other systems still run
                row[name] = f"error: {type(e).__name__}: {str(e)[:200]}"
        if torch is not None:
            for kind in ("cells", "nn.LSTM no cuDNN", "nn.LSTM cuDNN"):
                fn = _torch_lstm(torch, H, B, T, kind)
                if kind == "cells":
                    grads["torch cells"] = fn()

                def sync(fn=fn):
                    fn()
                    torch.cuda.synchronize()
                systems[f"torch {kind}"] = sync
        try:
            step, first, platform = _jax_lstm(H, B, T)
            row["jax first call s"], row["jax platform"] = first, platform
            systems["jax jit+scan"] = step
            grads["jax jit+scan"] = step()
        except Exception as e:  # noqa: BLE001
            row["jax jit+scan"] = f"error: {type(e).__name__}: {str(e)[:200]}"
        ref = ref or grads.get("jax jit+scan")
        row["gradients checked against"] = "numpy float64" if H * B <= 512 * 64 else "JAX"
        for name, (dW, db) in grads.items():
            if ref is not None:
                row[name + " max_rel_error"] = max(max_rel_error(dW, ref[0]), max_rel_error(db, ref[1]))
        for name, fn in systems.items():
            row[name] = timed(fn, reps)
        rows.append(row)
        print(_lstm_line(row), flush=True)
    return {"device": device, "rows": rows, "reps": reps}


def _lstm_line(row):
    cells = []
    for k, v in row.items():
        if isinstance(v, dict) and "median_ms" in v:
            cells.append(f"{k} {v['median_ms']:.2f} ms")
        elif isinstance(v, str) and v.startswith("error"):
            cells.append(f"{k} {v}")
    return f"H={row['H']} B={row['B']} T={row['T']}: " + "; ".join(cells)


# ---------------------------------------------------------------- small-op programs

def _small_programs():
    """name -> (dfc function, inputs, jax function or None, numpy check or None)."""
    from benchmarks import fixed_point, gru, hmc, ode, trivial_loop
    out = {}
    a = ode.inputs()
    _, jfwd, _, jjacfwd, _ = ode._jax()
    out["ode forward"] = (ode.ode_forward, a, lambda a=a: jfwd(*a))
    out["ode gradient"] = (ode.ode_gradient, a, lambda a=a: jjacfwd(*a))
    a = fixed_point.inputs()
    _, jsolve, _, jfp_jacfwd = fixed_point._jax()
    out["fixed point"] = (fixed_point.fixed_point, a, lambda a=a: jsolve(*a))
    out["fixed point gradient"] = (fixed_point.fixed_point_gradient, a, lambda a=a: jfp_jacfwd(*a))
    a = gru.inputs()
    jg = gru._jax()
    out["gru step"] = (gru.gru_step, a, lambda a=a: jg(*a))
    a = hmc.inputs(50)
    jhmc = hmc._jax_hmc()
    out["hmc"] = (hmc.hmc, a, lambda a=a: jhmc(*a))
    a = (np.int64(1), np.int64(5000))
    jlcg = trivial_loop._jax()
    out["trivial loop"] = (trivial_loop.lcg, a, lambda a=a: jlcg(*a))
    return out


def bench_smallops(device, reps):
    import jax
    rows = {}
    for name, (fn, a, jfn) in _small_programs().items():
        row = {}
        try:
            g = fn.trace(*a)
            s = dfc.Session(g, default_device=device, compile_loops=False)
            t = time.perf_counter()
            got = s.call(*a)
            row["dfc first call s"] = time.perf_counter() - t
            want = dfc.Session(g, default_device="cpu:0", compile_loops=False).call(*a)
            row["max abs difference vs cpu:0"] = max(
                float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) if np.size(x) else 0.0
                for x, y in zip(_flat(got), _flat(want)))
            row["dfc"] = timed(lambda: s.call(*a), reps)
        except Exception as e:  # noqa: BLE001
            row["dfc"] = f"error: {type(e).__name__}: {str(e)[:200]}"
        if jfn is not None:
            def jrun():
                return jax.block_until_ready(jfn())
            try:
                t = time.perf_counter()
                jrun()
                row["jax first call s"] = time.perf_counter() - t
                row["jax"] = timed(jrun, reps)
                row["jax platform"] = jax.devices()[0].platform
            except Exception as e:  # noqa: BLE001
                row["jax"] = f"error: {type(e).__name__}: {str(e)[:200]}"
        if isinstance(row.get("dfc"), dict) and isinstance(row.get("jax"), dict):
            row["dfc / jax"] = row["dfc"]["median_ms"] / row["jax"]["median_ms"]
        rows[name] = row
        print(name, {k: (v["median_ms"] if isinstance(v, dict) else v) for k, v in row.items()}, flush=True)
    return {"device": device, "rows": rows, "reps": reps}


# ---------------------------------------------------------------- the XLA prototype on the same programs

def bench_xla(reps, sizes=((512, 64), (1024, 256))):
    """The LSTM step and the small-op programs lowered whole to XLA (dfc/runtime/xla, jax.jit on JAX's
    default device: the GPU where there is one), first call and steady state, beside hand-written JAX."""
    import jax
    from dfc.runtime.xla import to_jax
    rows = {}
    from benchmarks import swapping
    progs = {f"lstm H={H} B={B}": (dfc_lstm.build(H, B, 100), make_inputs(H, B, 100), None) for H, B in sizes}
    for H, B in sizes:       # the same step written with slices instead of split (benchmarks/swapping.py)
        progs[f"lstm (slices) H={H} B={B}"] = (swapping.lstm_graph(B, H, False, "cpu:0"), swapping.inputs(100, B, H), None)
    for name, (fn, a, jfn) in _small_programs().items():
        progs[name] = (fn.trace(*a), a, jfn)
    for name, (g, a, jfn) in progs.items():
        row = {}
        try:
            t = time.perf_counter()
            p = to_jax(g)
            got = p(*a)
            row["xla first call s"] = time.perf_counter() - t
            want = dfc.Session(g, default_device="cpu:0", compile_loops=False).call(*a)
            row["max rel difference vs dfc cpu:0"] = max(max_rel_error(np.asarray(x, np.float64), np.asarray(y, np.float64))
                                                         for x, y in zip(_flat(got), _flat(want)) if np.size(y))
            row["xla"] = timed(lambda: p(*a), reps)
        except Exception as e:  # noqa: BLE001
            row["xla"] = f"error: {type(e).__name__}: {str(e)[:200]}"
        if jfn is not None:
            row["jax"] = timed(lambda: jax.block_until_ready(jfn()), reps)
        row["platform"] = jax.devices()[0].platform
        rows[name] = row
        print(name, {k: (v["median_ms"] if isinstance(v, dict) else v) for k, v in row.items()}, flush=True)
    return {"rows": rows, "reps": reps}


# ---------------------------------------------------------------- FMA contraction

def bench_fma(device):
    out = {}

    def chain(a, b, c):
        y = a * b + c
        for _ in range(6):
            y = dfc.tanh(y) * a + b * c - y * 0.25
        return y
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(1 << 20).astype(np.float32) for _ in range(3)]
    spec = dfc.TensorSpec([1 << 20], "float32")

    def loop_chain(a, b, c):
        return dfc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, chain(y, b, c)), (0, a))[1]
    g = dfc.trace(loop_chain, spec, spec, spec)
    out["elementwise chain (float32, 2^20 elements, 3 iterations)"] = _fused_vs_unfused(g, args, device)
    x, W, b = make_inputs(512, 64, 100)
    out["LSTM step H=512 B=64 T=100 (loss, dW, db)"] = _fused_vs_unfused(dfc_lstm.build(512, 64, 100), (x, W, b), device)
    for k, v in out.items():
        print(k, v, flush=True)
    return {"device": device, "rows": out}


def _fused_vs_unfused(g, args, device):
    res = {}
    for fuse in ("1", "0"):
        os.environ["DFC_FUSE_ELEMENTWISE"] = fuse
        res[fuse] = _flat(dfc.Session(g, default_device=device).call(*args))
    os.environ.pop("DFC_FUSE_ELEMENTWISE")
    cpu = _flat(dfc.Session(g, default_device="cpu:0").call(*args))
    row = {"identical": all(np.array_equal(a, b) for a, b in zip(res["1"], res["0"]))}
    row["max_abs_diff fused vs unfused"] = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(res["1"], res["0"]))
    row["elements differing"] = int(sum(np.count_nonzero(a != b) for a, b in zip(res["1"], res["0"])))
    row["elements"] = int(sum(np.size(a) for a in res["1"]))
    row["max_rel_err fused vs cpu"] = max(max_rel_error(a, b) for a, b in zip(res["1"], cpu))
    row["max_rel_err unfused vs cpu"] = max(max_rel_error(a, b) for a, b in zip(res["0"], cpu))
    return row


# ---------------------------------------------------------------- Figure 13: the timeline of a swapping step

def bench_timeline(device, out_dir, T=200, H=512, B=64, capacity_mb=64):
    from benchmarks import swapping
    os.environ["DFC_BATCH_LOOP_GRADS"] = "0"
    g = swapping.lstm_graph(B, H, True, device)
    a = swapping.inputs(T, B, H)
    path = os.path.join(out_dir, "swap_trace.json")
    s = dfc.Session(g, memory_caps={device: int(capacity_mb * 2 ** 20)}, swap_threshold=0.5, trace=path)
    s.call(*a)                      # warm-up: kernels compiled, pool grown
    s.call(*a)
    res = {"device": device, "T": T, "H": H, "B": B, "capacity_mb": capacity_mb,
           "dfc_trace": summarize_trace(path, run=-1), "memory": s.memory_stats()[device]}
    torch = _torch_cuda()
    if torch is not None and device.startswith("gpu"):
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            s.call(*a)
            torch.cuda.synchronize()
        kpath = os.path.join(out_dir, "swap_cuda_trace.json")
        prof.export_chrome_trace(kpath)
        res["gpu_trace"] = summarize_cuda_trace(kpath)
    print(json.dumps(res, indent=1, default=str), flush=True)
    return res


def _union(spans):
    """Merged [start, end) intervals of a list of (start, end)."""
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _overlap(a, b):
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize_trace(path, run=-1):
    """Per lane of the last run in a dfc trace: busy ms; and how much of the swap lanes' time overlapped
    the compute lanes' kernels."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("run "))
    lo, hi = runs[run]
    lanes = {}
    for e in events:
        if e.get("ph") != "X" or not (lo <= e["ts"] <= hi) or str(e.get("name", "")).startswith("frame "):
            continue        # (a fused frame's span holds its kernels' spans: only the kernels count)
        lanes.setdefault(names.get((e["pid"], e["tid"]), "?"), []).append((e["ts"], e["ts"] + e["dur"]))
    swap = _union([sp for k, v in lanes.items() if k in ("swap out", "prefetch", "swap in") for sp in v])
    compute = _union([sp for k, v in lanes.items() if k not in ("swap out", "prefetch", "swap in", "runs") for sp in v])
    swap_ms = sum(e - s for s, e in swap) / 1e3
    return {"run_ms": (hi - lo) / 1e3, "lanes_busy_ms": {k: sum(e - s for s, e in _union(v)) / 1e3 for k, v in lanes.items()},
            "spans": {k: len(v) for k, v in lanes.items()}, "swap_ms": swap_ms,
            "swap_overlapping_compute_ms": _overlap(swap, compute) / 1e3}


def summarize_cuda_trace(path):
    """From a PyTorch-profiler Chrome trace: per CUDA stream, kernel and copy counts and busy ms, and how much
    of the device<->host copy time overlapped kernels running on another stream."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    streams, kernels, copies = {}, [], []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        stream = e.get("args", {}).get("stream", e.get("tid"))
        span = (e["ts"], e["ts"] + e.get("dur", 0))
        st = streams.setdefault(str(stream), {"kernels": 0, "copies": 0, "busy": []})
        if e["cat"] == "kernel":
            st["kernels"] += 1
            kernels.append((stream, span))
        else:
            st["copies"] += 1
            copies.append((stream, span, e.get("name", "")))
    out = {"streams": {k: {"kernels": v["kernels"], "copies": v["copies"],
                           "busy_ms": sum(e - s for s, e in _union(v["busy"] or [sp for st, sp in kernels if str(st) == k]
                                                                   + [sp for st, sp, _ in copies if str(st) == k])) / 1e3}
                       for k, v in streams.items()}}
    host_copies = [(st, sp) for st, sp, n in copies if "DtoH" in n or "HtoD" in n or "Device -> Pageable" in n
                   or "Pageable -> Device" in n or "Pinned" in n]
    kernels_by_stream = {}
    for st, sp in kernels:
        kernels_by_stream.setdefault(st, []).append(sp)
    overlap = 0.0
    for st in {st for st, _ in host_copies}:
        others = _union([sp for s2, v in kernels_by_stream.items() if s2 != st for sp in v])
        overlap += _overlap(_union([sp for s2, sp in host_copies if s2 == st]), others)
    out["host_copies"] = len(host_copies)
    out["host_copy_ms"] = sum(sp[1] - sp[0] for _, sp in host_copies) / 1e3
    out["host_copy_overlapping_kernels_ms"] = overlap / 1e3
    out["copy_streams"] = sorted({str(st) for st, _ in host_copies})
    out["kernel_streams"] = sorted({str(st) for st, _ in kernels})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("lstm", "smallops", "fma", "timeline", "xla"))
    ap.add_argument("--device", default="gpu:0")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sizes", default=None, help="H:B,H:B (lstm)")
    ap.add_argument("--json")
    ap.add_argument("--out", default=".")
    a = ap.parse_args(argv)
    if a.what == "lstm":
        sizes = [tuple(int(v) for v in s.split(":")) for s in a.sizes.split(",")] if a.sizes else LSTM_SIZES
        res = bench_lstm(a.device, a.reps, sizes=sizes)
    elif a.what == "smallops":
        res = bench_smallops(a.device, a.reps)
    elif a.what == "xla":
        res = bench_xla(a.reps)
    elif a.what == "fma":
        res = bench_fma(a.device)
    else:
        res = bench_timeline(a.device, a.out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return res


if __name__ == "__main__":
    sys.exit(main() and 0)
