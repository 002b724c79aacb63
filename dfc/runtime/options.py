"""RunOptions: every option of a Session in one object.

    opts = dfc.RunOptions(num_threads=0, memory_limit="2GB")
    dfc.Session(graph, options=opts)                        # or the same names as keywords:
    dfc.Session(graph, options=opts, trace="run.json")      # a keyword wins over the options object

A Session's keywords are exactly these fields; `None` means "the default", which for `mode`,
`num_threads` and `compile_loops` comes from $DFC_EXECUTOR, $DFC_NUM_THREADS and $DFC_COMPILE_LOOPS
(dfc/config.py parses every environment variable; docs/settings.md lists both tables, generated from
the declarations here and there).
"""
import dataclasses

from dfc.errors import DfcError

# Send/Recv values of this many bytes or more cross tasks through Ray's object store (by reference), smaller
# ones inline on the cluster's sockets (benchmarks/cluster.py, "transfer", measures both).
OBJECT_STORE_BYTES = 256 << 10


def _opt(default, doc):
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options of a Session (see the module docstring); `replace(**changes)` gives a copy."""
    mode: object = _opt(None, '"threads" (the executor; default, or $DFC_EXECUTOR) or "reference" (the '
                              'reference interpreter: one thread, whole graph, devices ignored).')
    num_threads: object = _opt(None, "Kernel pool size (default: the cores this process may use, or "
                                     "$DFC_NUM_THREADS); 0 runs every kernel inline.")
    parallel_iterations: object = _opt(None, "Overrides every loop's parallel_iterations (default: each "
                                             "loop's own).")
    printer: object = _opt(None, "Function that print ops call (default: print to stdout).")
    fuse_loops: object = _opt(None, "Run loop frames as fused Python (default: on in threads mode).")
    compile_loops: object = _opt(None, '"auto" (default, or $DFC_COMPILE_LOOPS): a run made twice that ran 0.2 s '
                                       'compiles whole to XLA in the background (numba compiles the loop frames of '
                                       'runs XLA refuses); True: numba compiles every loop frame at once; False: never.')
    device_map: object = _opt(None, 'Renames devices, e.g. {"gpu:0": "accel:0"}.')
    devices: object = _opt((), "More devices the placer may use for unplaced nodes.")
    default_device: object = _opt(None, "Device of nodes the placer does not move (default: cpu:0).")
    placement_costs: object = _opt(None, "A trace file of an earlier run, or node -> seconds: the placer "
                                         "uses these costs instead of its model.")
    memory_caps: object = _opt(None, "Accelerator capacities in bytes, by device.")
    track_memory: object = _opt(False, "Account bytes per device (memory_stats(), peak_bytes()).")
    memory_limit: object = _opt(None, 'Bytes the kernels may hold at once (int or "2GB"); past it, '
                                      'DfcOutOfMemory.')
    swap_memory: object = _opt(False, "Swap every loop's stacks to host memory (whitepaper 5.3).")
    swap_threshold: object = _opt(0.5, "Device fullness (0-1) from which stack values are swapped out.")
    swap_min_bytes: object = _opt(4096, "Smallest stack value that is swapped.")
    swap_prefetch: object = _opt(2, "Stack values brought back ahead of the gradient loop's pops.")
    container: object = _opt(None, "Resource container of Variables that name none (default: the "
                                   "process's default container).")
    checkpoint_dir: object = _opt(None, "Directory Save/Restore paths resolve in.")
    cluster: object = _opt(None, "A dfc.cluster.connect(...) cluster whose tasks run their partitions.")
    wire_compression: object = _opt(None, 'None or "bfloat16": float32 values between tasks sent as '
                                          'bfloat16 (lossy, whitepaper 5.5).')
    object_store_bytes: object = _opt(OBJECT_STORE_BYTES, "Values of at least this many bytes travel "
                                                          "between tasks through Ray's object store.")
    trace: object = _opt(None, "Path of a Chrome trace-event timeline of the runs (rewritten after each).")
    summary_dir: object = _opt(None, "Where summary ops write TensorBoard events.")
    progress: object = _opt(None, "Progress bars: True, False, or None (only when stderr is a terminal).")

    @classmethod
    def of(cls, options=None, keywords=None):
        """`options` (a RunOptions, a dict, or None) with `keywords` on top; an unknown name is a DfcError."""
        if options is None:
            options = cls()
        elif isinstance(options, dict):
            options = cls.of(None, options)
        elif not isinstance(options, cls):
            raise DfcError(f"options must be a dfc.RunOptions (or a dict of its fields), not "
                           f"{type(options).__name__}")
        return options.replace(**(keywords or {}))

    def replace(self, **changes):
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise DfcError(f"unknown Session option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                           f"(the options: {', '.join(f.name for f in dataclasses.fields(self))})")
        return dataclasses.replace(self, **changes)


def options_table():
    """The options as the Markdown table of docs/settings.md."""
    rows = ["| Option | Default | Meaning |", "|---|---|---|"]
    for f in dataclasses.fields(RunOptions):
        default = "`()`" if f.default == () else f"`{f.default!r}`"
        rows.append(f"| `{f.name}` | {default} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"
