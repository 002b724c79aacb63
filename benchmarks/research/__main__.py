"""The research benchmark: every case of benchmarks/research/ in its own fresh process with an empty
DFC_CACHE_DIR (run.py), dfc in its default mode against JAX jit, PyTorch eager and numpy; writes
benchmarks/results/research.json and research.md and prints the table.

    python -m benchmarks.research [--only maml,reinforce] [--size bench|tiny] [--settle 8] [--budget 6]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "results")
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_case(name, size, settle, budget, timeout, compile_loops="default"):
    """One case in a fresh process and cache directory: its result dict, or one saying why there is none."""
    with tempfile.TemporaryDirectory(prefix="dfc-research-cache-") as cache:
        env = dict(os.environ, DFC_CACHE_DIR=cache, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "benchmarks.research.run", name, "--size", size, "--settle", str(settle),
               "--budget", str(budget), "--compile-loops", compile_loops]
        start, load = time.perf_counter(), os.getloadavg()[0]
        try:
            p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"name": name, "error": f"no result within {timeout} s", "load_avg_at_start": load}
        lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines:
            tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"name": name, "error": f"process exited {p.returncode}: {tail[:300]}", "load_avg_at_start": load}
        out = json.loads(lines[-1])
        out["process_s"] = time.perf_counter() - start
        return out


def _ms(r):
    return (r or {}).get("steady", {}).get("median_ms")


def _f(v, unit=""):
    if v is None:
        return "—"
    return (f"{v:,.0f}" if v >= 100 else f"{v:.3g}") + unit


def _ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "—"


def _xla(d):
    """How dfc's runs compiled to XLA (the default mode's compiled path)."""
    out = []
    for r in d.get("xla_runs", []):
        if r["state"] == "compiled":
            when = d.get("compiled_after_s")
            out.append(f"XLA: compiled in {r['compile_seconds']:.1f} s" + (" (disk)" if r.get("from_disk") else "")
                       + (f", running compiled {when:.1f} s after the first call" if when is not None else ""))
        elif r["state"] in ("refused", "failed"):
            out.append(f"XLA {r['state']}: {(r['reason'] or '')[:90]}")
        else:
            out.append(f"XLA: {r['state']}" + (f" ({r['compiled_ms']} ms compiled vs {r['fused_ms']} ms fused)"
                                                if r["state"] == "slower" else ""))
    return "; ".join(out)


def _frames(d):
    """How dfc ran its runs (XLA) and compilable loop frames (numba) while the steady state was timed, and
    its compiles."""
    xla = _xla(d)
    if xla and all(r["state"] in ("compiled", "slower") for r in d.get("xla_runs", [])):
        return xla
    numba = _numba_frames(d)
    return f"{xla}; numba: {numba}" if xla else numba


def _numba_frames(d):
    runs = d.get("frame_runs_steady")
    if runs is None:
        return "—"
    total = runs["compiled"] + runs["fused"]
    text = f"{runs['compiled']}/{total} compiled" if total else "no compilable frame"
    done = [f"{s:.1f} s {how}" for _, s, how in d.get("compiles", [])]
    text += "; compiles: " + ", ".join(done) if done else "; no compile finished"
    jobs = [f"{state} {secs:.0f} s" for _, state, secs, _ in d.get("background_jobs", []) if state != "compiled"]
    return text + ("; background: " + ", ".join(jobs) if jobs else "")


def failures(res):
    """[(case, what failed, message)]: dfc errors, failed checks, loop frames dfc does not compile,
    competitors that could not run."""
    out = []
    for r in res["cases"]:
        if "error" in r:
            out.append((r["name"], "process", r["error"]))
            continue
        if "error" in r["dfc"]:
            out.append((r["name"], "dfc", r["dfc"]["error"]))
        for c in r["checks"]:
            if not c["ok"] and not ("error" in r["dfc"] and r["dfc"]["error"] in c.get("error", "")):
                out.append((r["name"], f"check: {c['label']}",
                            c.get("error") or f"max abs error {c['max_abs_error']}, max rel error {c['max_rel_error']}"))
        for frame, status, node, reason in dict.fromkeys(map(tuple, r["dfc"].get("not_compiled", []))):
            out.append((r["name"], f"frame {frame} {status}" + (f" (blocked by {node})" if node else ""), reason))
        for frame, state, secs, err in r["dfc"].get("background_jobs", []):
            if state == "failed":
                out.append((r["name"], f"background compile of {frame} failed after {secs:.1f} s", err))
        for key in ("jax", "torch"):
            if "error" in r.get(key, {}) and r[key]["error"] != "—":
                out.append((r["name"], key, r[key]["error"]))
    return out


def report(res):
    m = res["machine"]
    c = m["conditions"]
    mode = res.get("compile_loops", "default")
    L = [f"### Research programs: dfc in {'its default mode' if mode == 'default' else 'DFC_COMPILE_LOOPS=' + mode} "
         f"against JAX jit, PyTorch eager and numpy", "",
         f"{c['date']}; {m['cpus']} cores {m['processor']}; BLAS threads: {c['blas_threads']}; numpy's OpenBLAS "
         f"kernels: {c['blas_kernels']}; versions: " + ", ".join(f"{k} {v or 'not installed'}"
                                                                 for k, v in c["versions"].items())
         + (f"; commit {res['checkout']['commit']}, {res['checkout']['dfc_files_changed']} files under dfc/ changed "
            "in the working tree" if "checkout" in res else "")
         + f". 1-minute load average {res['load_avg_at_start']:.1f} at the start, {res['load_avg_at_end']:.1f} at the "
           f"end (the machine is shared: ratios move with the load; each row gives the load at its start).", "",
         "Each program runs in a fresh process with an empty `DFC_CACHE_DIR`. dfc first call: the first call of the "
         "`@dfc.function` (trace, plan, run; in the default mode any compile runs in the background); then the "
         f"program is called for {res['settle_s']:g} s as a user would (median of its first and last 5 calls), and "
         "the steady state of every system is timed round-robin (median ms, ≥ 5 calls each). JAX first call: "
         "trace + compile + run. `dfc compiled path`: how dfc's run compiled to XLA (in a background thread; when it ran compiled, counted from the first call), or why not; then, for runs XLA refused, of the runs of dfc's compilable loop frames while the steady state was timed, how many ran compiled by numba, and the numba compiles that had finished by the end.", "",
         "| program | load | dfc first call s | JAX first call s | dfc ÷ JAX (first) | dfc settling: first → last ms | "
         "dfc ms | JAX ms | PyTorch ms | numpy ms | dfc ÷ JAX | PyTorch ÷ JAX | numpy ÷ JAX | dfc compiled path | "
         "dfc agrees |", "|" + "---|" * 15]
    for r in res["cases"]:
        if "error" in r:
            L.append(f"| {r['name']} | {r['load_avg_at_start']:.1f} | " + " | ".join(["—"] * 12) + f" | {r['error']} |")
            continue
        d, j = r["dfc"], r.get("jax", {})
        settle = d.get("settle")
        settling = (f"{_f(settle['first_calls_median_ms'])} → {_f(settle['last_calls_median_ms'])} "
                    f"({settle['calls']} calls)") if settle else "—"
        frames = _frames(d)
        agree = "; ".join(("yes" if c["ok"] else "**no**") + f" ({c['label']}"
                          + (f", rel {c['max_rel_error']:.1e})" if c.get("max_rel_error") is not None else ")")
                          for c in r["checks"])
        dms, jms, tms, nms = _ms(d), _ms(j), _ms(r.get("torch")), _ms(r.get("numpy"))
        first = d.get("first_call_s")
        dfc_cell = _f(dms) if "error" not in d else f"fails: {d['error'][:120]}"
        L.append(f"| {r['name']} | {r['load_avg_at_start']:.1f} | {_f(first)} | {_f(j.get('first_call_s'))} | "
                 f"{_ratio(first, j.get('first_call_s'))} | {settling} | {dfc_cell} | {_f(jms)} | {_f(tms)} | "
                 f"{_f(nms)} | {_ratio(dms, jms)} | {_ratio(tms, jms)} | {_ratio(nms, jms)} | {frames} | {agree} |")
    L += ["", "Programs:", ""]
    for r in res["cases"]:
        if "error" in r:
            continue
        notes = [r.get("note")] + [f"{k}: {r[k]['note']}" for k in ("jax", "torch", "numpy")
                                   if r.get(k, {}).get("note")]
        L.append(f"* **{r['name']}**: {r['description']}" + "".join(f"; {n}" for n in notes if n))
    fails = failures(res)
    L += ["", "Failures:" if fails else "Failures: none.", ""]
    for name, what, msg in fails:
        L.append(f"* {name}, {what}: " + " ".join(str(msg).split()).replace("|", "/"))      # one line each
    return "\n".join(L) + "\n"


def checkout():
    """The commit measured and how many files under dfc/ differed from it (helpers edit one working tree)."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("rev-parse", "--short", "HEAD").strip() or None,
            "dfc_files_changed": len([x for x in git("status", "--porcelain", "--", "dfc").splitlines() if x.strip()])}


def _stem(compile_loops):
    """research.json/.md for the default mode; research_compile_loops_X for a forced one."""
    return "research" if compile_loops == "default" else f"research_compile_loops_{compile_loops}"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--size", default="bench", choices=("bench", "tiny"))
    ap.add_argument("--settle", type=float, default=8.0, help="seconds of dfc calls after its first one")
    ap.add_argument("--budget", type=float, default=6.0, help="seconds of round-robin timing at most, per case")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it is reported as hung")
    ap.add_argument("--compile-loops", default="default", choices=("default", "auto", "0", "1"),
                    help="dfc's DFC_COMPILE_LOOPS (default: unset, the library's default mode)")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    from benchmarks.__main__ import machine
    from benchmarks.research import case_names
    names = [n for n in case_names() if not a.only or n in a.only.split(",")]
    res = {"machine": machine(), "checkout": checkout(), "size": a.size, "compile_loops": a.compile_loops, "settle_s": a.settle, "budget_s": a.budget,
           "load_avg_at_start": os.getloadavg()[0], "cases": []}
    for name in names:
        print(f"== {name}", flush=True)
        res["cases"].append(run_case(name, a.size, a.settle, a.budget, a.timeout, a.compile_loops))
        res["load_avg_at_end"] = os.getloadavg()[0]
    if not a.no_save:           # the measurements first, whatever happens to the table
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, _stem(a.compile_loops) + ".json"), "w") as f:
            json.dump(res, f, indent=1, default=float)
    text = report(res)
    if not a.no_save:
        with open(os.path.join(RESULTS, _stem(a.compile_loops) + ".md"), "w") as f:
            f.write(text)
    print(text)
    return res


def from_json(path=os.path.join(RESULTS, "research.json")):
    """The table of a saved run (python -c 'from benchmarks.research.__main__ import from_json; print(from_json())')."""
    with open(path) as f:
        return report(json.load(f))


if __name__ == "__main__":
    main()
