"""dfc command line: compile, run, show, viz.

Exit status: 0 on success, 1 on a DfcError (message on stderr, no traceback
unless --debug), 2 on bad usage (click's own convention).
"""
import ast
import json
import os
import sys

import click

from dfc.errors import DfcError, DfcInputError


class _Main(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DfcError as e:
            if ctx.params.get("debug"):
                raise
            click.echo(f"dfc: error: {e}", err=True)
            ctx.exit(1)


@click.group(cls=_Main)
@click.option("--debug", is_flag=True, help="Show full tracebacks.")
@click.version_option(package_name="dfc")
def main(debug):
    """dfc: Python control flow -> dataflow graphs, and a runtime that runs them."""


@main.command("compile")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-f", "--function", "names", multiple=True, help="Only this function (repeatable).")
@click.option("-o", "--output", "out_dir", default=".", type=click.Path(file_okay=False),
              help="Directory for NAME.json files.")
def compile_cmd(file, names, out_dir):
    """Compile every dfc.function with an input_signature in FILE to JSON graphs."""
    if not os.path.exists(file):
        raise DfcError(f"no such file: {file}")
    from dfc.compiler.autograph import compile_file
    os.makedirs(out_dir, exist_ok=True)
    results = compile_file(file, list(names) or None, out_dir)
    if not results:
        raise DfcError(f"{file}: no dfc.function with an input_signature found"
                       + (f" named {', '.join(names)}" if names else ""))
    for name, path, graph in results:
        s = graph.summary()
        click.echo(f"{name}: {path} ({s['nodes']} nodes, {s['conds']} conds, {s['loops']} loops)")


def _parse_value(name, text):
    if text.startswith("@"):
        import numpy as np
        path = text[1:]
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DfcInputError(f"input {name}: cannot load {path}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise DfcInputError(f"input {name}: {text!r} is not a number, list or @file.npy") from None


@main.command("run")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=VALUE|NAME=@file.npy",
              help="A graph input (repeatable).")
@click.option("--output", "out_path", type=click.Path(dir_okay=False), help="Write outputs to an .npz file.")
@click.option("--json", "as_json", is_flag=True, help='Print {"outputs": [...]} as JSON.')
@click.option("--mode", type=click.Choice(["reference", "threads"]), default=None, help="Executor mode.")
@click.option("--device-map", "device_map", multiple=True, metavar="FROM=TO",
              help="Run nodes placed on device FROM on device TO (repeatable), e.g. gpu:0=cpu:1.")
def run_cmd(graph_file, inputs, out_path, as_json, mode, device_map):
    """Run a graph saved by `dfc compile` (or dfc.save)."""
    import numpy as np
    from dfc.ir.serialize import load
    from dfc.runtime.session import Session
    g = load(graph_file)
    feeds = {}
    for item in inputs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--input needs NAME=VALUE, got {item!r}")
        feeds[name] = _parse_value(name, value)
    dmap = _parse_device_map(device_map)
    flat = [np.asarray(v) for v in Session(g, mode=mode, device_map=dmap).call_flat(**feeds)]
    if out_path:
        np.savez(out_path, **{f"output_{k}": v for k, v in enumerate(flat)})
    if as_json:
        click.echo(json.dumps({"outputs": [v.tolist() for v in flat]}))
    elif not out_path:
        for k, v in enumerate(flat):
            click.echo(f"output {k}: {np.array2string(v, threshold=50)}")


def _parse_device_map(items):
    out = {}
    for item in items:
        a, sep, b = item.partition("=")
        if not sep or not a or not b:
            raise click.UsageError(f"--device-map needs FROM=TO, got {item!r}")
        out[a.strip()] = b.strip()
    return out


@main.command("show")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("--partitions", is_flag=True, help="Print the per-device graphs with their Send/Recv nodes.")
@click.option("--device-map", "device_map", multiple=True, metavar="FROM=TO", help="As for `dfc run`.")
def show_cmd(graph_file, partitions, device_map):
    """Print one line per node."""
    from dfc.ir.serialize import load
    g = load(graph_file)
    if not partitions:
        click.echo(g.text())
        return
    from dfc.runtime.devices import DeviceSet
    from dfc.runtime.partition import place, partition
    where = place(g, DeviceSet(), _parse_device_map(device_map))
    click.echo(partition(g, where).text())


@main.command("viz")
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="graph.dot, graph.mmd (mermaid) or graph.svg (needs graphviz's dot).")
def viz_cmd(graph_file, out):
    """Draw the graph with frames as clusters."""
    from dfc.ir.serialize import load
    from dfc.ir.viz import write_picture
    write_picture(load(graph_file), out)
    click.echo(out)


if __name__ == "__main__":
    main()
