"""dfc command line: compile, run, show, viz.

Exit status: 0 on success, 1 on a DfcError (message on stderr, no traceback
unless --debug), 2 on bad usage (click's own convention). A user mistake
never prints a Python traceback: errors in the user's own module show the
user's frames only; anything else unexpected is reported in one line as a
dfc bug, with the traceback under --debug.
"""
import ast
import errno
import json
import math
import os
import re

import click

from dfc import config
from dfc.errors import DfcError, DfcInputError


class _Main(click.Group):
    def invoke(self, ctx):
        debug = ctx.params.get("debug")
        before = config.traceback_mode()
        if debug:
            config.set_traceback("full")    # --debug shows dfc's own frames too
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, BrokenPipeError):
            raise               # click's own handling: exit codes, usage errors, a closed pipe
        except DfcError as e:
            if debug:
                raise
            if _from_broken_pipe(e):    # an in-graph print to a closed pipe (`dfc run ... | head -1`)
                raise BrokenPipeError(errno.EPIPE, "Broken pipe") from e
            _fail(ctx, f"dfc: error: {e}")
        except KeyboardInterrupt:
            if debug:
                raise
            _fail(ctx, "dfc: interrupted")
        except OSError as e:    # the machine's, not dfc's: a full disk, stdout on /dev/full, ...
            if debug:
                raise
            _fail(ctx, f"dfc: error: {e}")
        except Exception as e:  # noqa: BLE001 - a dfc bug: one line, not a traceback
            if debug:
                raise
            _fail(ctx, f"dfc: internal error: {type(e).__name__}: {e}\n"
                       f"This is a bug in dfc; run again with `dfc --debug ...` for the traceback and report it.")
        finally:
            config.set_traceback(before)


def _from_broken_pipe(e):
    """Whether the error (a kernel failure, say) was caused by writing to a closed stdout."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, BrokenPipeError):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _fail(ctx, message):
    click.echo(message, err=True)
    ctx.exit(1)


@click.group(cls=_Main)
@click.option("--debug", is_flag=True, help="Show full tracebacks.")
@click.version_option(package_name="dfc")
def main(debug):
    """dfc: Python control flow -> dataflow graphs, and a runtime that runs them.

    Exit status: 0 on success, 1 on an error (message on stderr), 2 on bad usage."""


@main.command("compile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-f", "--function", "names", multiple=True, help="Only this function (repeatable).")
@click.option("-o", "--output", "out_dir", default=".", type=click.Path(file_okay=False),
              help="Directory for NAME.json files (created if missing).")
def compile_cmd(file, names, out_dir):
    """Compile every dfc.function with an input_signature in FILE to JSON graphs.

    FILE is imported as a module: code that should not run on import belongs
    under `if __name__ == "__main__":`. An error raised by FILE's code is shown
    with FILE's own lines."""
    if not os.path.exists(file):
        raise DfcError(f"no such file: {file}")
    from dfc.compiler.autograph import compile_file
    results = compile_file(file, list(names) or None, out_dir)
    if not results:
        raise DfcError(f"{file}: no dfc.function with an input_signature found"
                       + (f" named {', '.join(names)}" if names else ""))
    for name, path, graph in results:
        s = graph.summary()
        click.echo(f"{name}: {path} ({s['nodes']} nodes, {s['conds']} conds, {s['loops']} loops)")


# ------------------------------------------------------------------ dfc run
class ByteSize(click.ParamType):
    """A byte count as Session(memory_limit=...) reads it: 2000000000, 2GB (powers of 1000), 2GiB."""
    name = "SIZE"

    def convert(self, value, param, ctx):
        from dfc.runtime.limits import parse_bytes     # one definition of the units, shared with Session
        try:
            return parse_bytes(value)
        except DfcError as e:
            self.fail(e.message, param, ctx)


_JSON_HELP = ('Print {"outputs": [...]}: outputs flattened depth-first, each a (nested) JSON list or '
              'number. NaN and infinities are written as the strings "NaN", "Infinity" and "-Infinity", '
              'so the output is strict JSON.')


@main.command("run")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=VALUE|NAME=@file.npy",
              help="A graph input, once per NAME (repeatable). VALUE is a number or list literal.")
@click.option("--output", "out_path", type=click.Path(dir_okay=False),
              help="Write the outputs (output_0, output_1, ...) as an .npz archive to exactly this path; "
                   "no suffix is added. Its directory must exist.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.option("--mode", type=click.Choice(["reference", "threads"]), default=None, help="Executor mode.")
@click.option("--device-map", "device_map", multiple=True, metavar="FROM=TO",
              help="Run nodes placed on device FROM on device TO (repeatable), e.g. gpu:0=cpu:1.")
@click.option("--checkpoint-dir", "checkpoint_dir", default=".", show_default=True,
              type=click.Path(exists=True, file_okay=False),
              help="The graph's Save/Restore ops may only touch files under this directory "
                   "(relative paths, no '..').")
@click.option("--memory-limit", "memory_limit", type=ByteSize(), default=None, metavar="SIZE",
              help="Stop with an out-of-memory error when the run holds more than SIZE bytes of tensors: "
                   "bytes or a number with KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), "
                   "e.g. 2GB.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, metavar="OUT.json",
              help="Write a timeline of the run as a Chrome trace-event file (open it in ui.perfetto.dev or "
                   "chrome://tracing): a lane per device, a span per kernel, Send/Recv and swapping lanes.")
@click.option("--progress/--no-progress", "progress", default=None,
              help="Draw the bars of the graph's dfc.progress ops on stderr (default: only when stderr is a "
                   "terminal).")
@click.option("--cluster", "cluster_address", default=None, metavar="local|ADDRESS",
              help="Run the partitions of devices named JOB:TASK/KIND:N in their task's process on a Ray "
                   "cluster: 'local' starts one on this machine; an address ('auto', 'ray://host:10001') "
                   "joins a running one (needs dfc[cluster]).")
@click.option("--tasks", "tasks", default=None, metavar="JOB=N,...",
              help="The cluster's tasks, e.g. worker=2,ps=1 (default: the tasks the graph's devices name).")
@click.option("--place", "places", multiple=True, metavar="JOB|TASK=WHERE",
              help="Where a job's or task's processes run on the Ray cluster: spread, node:ID, ip:ADDRESS, "
                   "label:KEY=VALUE or resource:NAME, e.g. --place ps=label:zone=b --place worker=spread "
                   "(repeatable; needs --cluster).")
def run_cmd(graph_file, inputs, out_path, as_json, mode, device_map, checkpoint_dir, memory_limit, trace_path,
            progress, cluster_address, tasks, places):
    """Run a graph saved by `dfc compile` (or dfc.save)."""
    import numpy as np
    from dfc.ir.serialize import load
    from dfc.runtime.session import Session
    feeds = _parse_inputs(inputs)
    dmap = _parse_device_map(device_map)
    if out_path:
        _check_output_path(out_path)
    g = load(graph_file)
    limits = {} if memory_limit is None else {"memory_limit": memory_limit}
    cluster = _connect(cluster_address, tasks, g, dmap, checkpoint_dir, places)
    try:
        session = Session(g, mode=mode, device_map=dmap, checkpoint_dir=checkpoint_dir, trace=trace_path,
                          progress=progress, cluster=cluster, **limits)
        flat = [np.asarray(v) for v in session.call_flat(**feeds)]
    finally:
        if cluster is not None:
            cluster.shutdown()
    if out_path:
        _write_npz(out_path, {f"output_{k}": v for k, v in enumerate(flat)})
    if as_json:
        click.echo(json.dumps({"outputs": [_json_output(k, v) for k, v in enumerate(flat)]}, allow_nan=False))
    elif not out_path:
        for k, v in enumerate(flat):
            click.echo(f"output {k}: {np.array2string(v, threshold=50)}")


def _connect(address, tasks, graph, dmap, ckpt, places=()):
    """The cluster of --cluster/--tasks/--place (None without --cluster)."""
    if address is None:
        if tasks or places:
            raise click.UsageError(f"{'--tasks' if tasks else '--place'} needs --cluster local|ADDRESS")
        return None
    placement = {}
    for item in places:
        key, eq, where = item.partition("=")
        if not eq or not key.strip() or not where.strip():
            raise click.UsageError(f"--place {item!r}: use JOB=WHERE or TASK=WHERE, e.g. ps=label:zone=b")
        placement[key.strip()] = where.strip()
    from dfc.runtime import cluster
    from dfc.runtime.devices import split_task
    from dfc.runtime.partition import map_device
    if tasks is None:        # the tasks the graph's devices name (after the device map)
        named = {}
        for n in graph.nodes.values():
            if n.device:
                t = split_task(map_device(n.device, dmap, n.name))[0]
                if t is not None:
                    job, k = t.split(":")
                    named[job] = max(named.get(job, 0), int(k) + 1)
        tasks = named or {"worker": 1}
    import os
    return cluster.connect(None if address == "local" else address, tasks, checkpoint_dir=os.path.abspath(ckpt),
                           placement=placement or None, log_to_driver=False)


def _parse_inputs(items):
    feeds = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--input needs NAME=VALUE, got {item!r}")
        if name in feeds:
            raise click.UsageError(f"--input {name} is given twice; give each input once")
        feeds[name] = _parse_value(name, value)
    return feeds


def _parse_value(name, text):
    if text.startswith("@"):
        return _load_npy(name, text[1:])
    try:
        return json.loads(text)
    except (ValueError, RecursionError):      # not JSON (or too deep/long): try a Python literal
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise DfcInputError(f"input {name}: {_short(text)!r} is not a number, list or @file.npy") from None


def _load_npy(name, path):
    import numpy as np
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
            if magic != b"\x93NUMPY":
                what = "an .npz archive" if magic.startswith(b"PK") else "not an .npy file"
                raise DfcInputError(f"input {name}: cannot load {path}: {what}; give a file written "
                                    f"by numpy.save (NAME=@file.npy)")
            f.seek(0)
            return np.load(f, allow_pickle=False)
    except OSError as e:
        raise DfcInputError(f"input {name}: cannot load {path}: {e.strerror or e}") from None
    except (ValueError, EOFError) as e:
        raise DfcInputError(f"input {name}: cannot load {path}: {e}") from None


def _short(text, limit=60):
    return text if len(text) <= limit else text[:limit] + "..."


def _check_output_path(path):
    """Before running: the folder of `path` must be an existing directory."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(folder):
        return
    existing = folder
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if existing and not os.path.isdir(existing):
        raise DfcError(f"cannot write --output {path}: {existing} is a file, not a directory")
    raise DfcError(f"cannot write --output {path}: directory {folder} does not exist (create it first)")


def _write_npz(path, arrays):
    import numpy as np
    try:
        with open(path, "wb") as f:     # a file object: numpy adds no .npz suffix
            np.savez(f, **arrays)
    except OSError as e:
        raise DfcError(f"cannot write --output {path}: {e.strerror or e}") from None


def _json_output(k, v):
    import numpy as np
    if v.dtype.kind not in "biuf":
        raise DfcError(f"output {k} holds {v.dtype} values, which --json cannot print; use --output")
    if v.dtype.kind == "f" and not np.isfinite(v).all():
        return _json_float(v.tolist())
    return v.tolist()


def _json_float(x):
    """NaN and infinities (invalid in strict JSON) as the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(x, list):
        return [_json_float(y) for y in x]
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _parse_device_map(items):
    out = {}
    for item in items:
        a, sep, b = item.partition("=")
        if not sep or not a or not b:
            raise click.UsageError(f"--device-map needs FROM=TO, got {item!r}")
        out[a.strip()] = b.strip()
    return out


# ------------------------------------------------------------ dfc show / viz
@main.command("show")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("--partitions", is_flag=True, help="Print the per-device graphs with their Send/Recv nodes.")
@click.option("--fused", is_flag=True, help="Print the Python generated for each fused loop frame.")
@click.option("--device-map", "device_map", multiple=True, metavar="FROM=TO", help="As for `dfc run`.")
def show_cmd(graph_file, partitions, fused, device_map):
    """Print one line per node, ending with the user's variable and file:line that built it."""
    from dfc.ir.serialize import load
    dmap = _parse_device_map(device_map)
    g = load(graph_file)
    if fused:
        from dfc.runtime.session import Session
        s = Session(g)
        names = {}
        frames = s.fused_frames(names)
        compiled = _compile_status(s)
        for name, source in frames.items():
            click.echo(f"# ---- frame {_shown(name)}\n{compiled.get(name, '')}{source}" + _legend(source, names))
        if not frames:
            click.echo("# the graph has no loop frames")
        _show_run(s)
        return
    if not partitions:
        click.echo(g.text())
        return
    from dfc.runtime.devices import DeviceSet
    from dfc.runtime.partition import place, partition
    where = place(g, DeviceSet(), dmap)
    click.echo(partition(g, where).text())


_SHOWN = re.compile(r"[A-Za-z0-9_./:-]{1,256}\Z")
_INDEXED = re.compile(r"^ *# (node|loop frame) (\d+)$", re.M)


def _shown(name):
    """A node or frame name as printed: as it is when made of the loader's characters, else escaped
    (ascii) and cut, so no name can start a line of its own or hide what follows it."""
    return name if _SHOWN.match(name) else ascii(name[:200]) + ("..." if len(name) > 200 else "")


def _legend(source, names):
    """The legend of a generated source, which names nodes and frames by index only (its comments
    `# node 12`, `# loop frame 3`): each index it mentions with the name of that node or frame, as
    `names` (Session.fused_frames / compiled_run) gives them; "" if it mentions none. Printed by the CLI
    only: a name never becomes part of generated source."""
    cited = sorted({(kind, int(k)) for kind, k in _INDEXED.findall(source or "")}, key=lambda x: (x[0] == "node", x[1]))
    lines = []
    for kind, k in cited:
        table = names.get("nodes" if kind == "node" else "frames", [])
        if k < len(table):
            lines.append(f"\n#   {kind} {k}: {_shown(table[k])}")
    return "\n# ---- legend: the nodes and loop frames the code above names by index" + "".join(lines) if lines else ""


def _show_run(session):
    """The whole run: whether the default mode compiles it with XLA, the root frame's generated code, and
    whether compile_loops=True compiles it as one."""
    if not session.graph.signature:
        return
    from dfc.runtime.xla.auto import explain
    xla = explain(session.graph)
    line = {"lowers": "the run compiles whole with XLA (once it has been made twice, for 0.2 s)" +
                      (f": {xla['reason']}" if xla["reason"] else ""),
            "refused": f"the run does not compile with XLA: {xla['reason']}",
            "unknown": f"whether the run compiles with XLA is not known before a run: {xla['reason']}"}[xla["status"]]
    click.echo(f"# ---- default mode: {line}")
    names = {}
    info = session.compiled_run(names)
    if info["status"] == "scheduled":
        click.echo(f"# ---- the whole run: the scheduler runs the root frame ({info['reason']})")
        return
    if info["status"] == "compiled":
        line = "compile_loops: compiled with numba as one function"
    else:
        node = info["blocked_by"]
        line = "compile_loops: not compiled as one function" + (f", blocked by {_shown(node)}" if node else "") + \
            f": {info['reason']}"
    click.echo(f"# ---- the whole run (root frame)\n# {line}\n{info['source']}" + _legend(info["source"], names))


def _compile_status(session):
    """frame name -> a comment line saying whether compile_loops=True compiles the frame (numba), and if
    not, which node blocked it."""
    from dfc.runtime.compiled import available
    if not available():
        return {}
    out = {}
    for name, info in session.compiled_frames().items():
        if info["status"] == "compiled":
            line = "# compile_loops: compiled with numba" + (" (inside its parent frame)" if info.get("nested") else "")
        elif info["status"] == "fused":
            node = info["blocked_by"]
            op = session.graph.nodes[node].op if node in session.graph.nodes else None
            line = "# compile_loops: not compiled" + (f", blocked by {_shown(node)} ({op})" if node else "") + \
                f": {info['reason']}"
        else:
            continue
        out[name] = line + "\n"
    return out


@main.command("viz")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="graph.dot (Graphviz), graph.mmd (Mermaid) or graph.svg (laid out in Python; "
                   "needs `pip install 'dfc[viz]'`, not Graphviz).")
def viz_cmd(graph_file, out):
    """Draw the graph: loops, conds and their branches as clusters, nodes labelled with the
    user's variable names and source lines."""
    from dfc.ir.serialize import load
    from dfc.ir.viz import write_picture
    write_picture(load(graph_file), out)
    click.echo(out)


if __name__ == "__main__":
    main()
