"""The kernel of the Progress op and the progress bars it drives (rich).

`Progress(step, total, *metrics)` sets bar `name` (the node's attr) to
`step` of `total` steps done, with the metric values shown after it
("loss=0.0213 acc=0.97"). One bar per name; a step below the bar's last one
starts the bar again (a new loop). Bars are drawn on stderr, like tqdm's, so
stdout stays clean for the program's own output and `dfc run --json`.

Whether a run draws bars is decided when it starts (`display_for_run`):
`Session(progress=True)` / `dfc run --progress` turn them on, `False` off;
the default (None) draws them only when stderr is a terminal, and the
environment variable DFC_PROGRESS=1 / 0 overrides that default. Off, the
kernel returns at once. On a terminal the bars refresh live (updates from
the graph are passed on at most every 0.1 s, and always the last one);
elsewhere (a pipe, a log file) the final state of each bar is printed once
when the run ends. Between runs the display stops: a bar that finished is
dropped, one that did not goes on in the next run. Outside any run (eager
mode) the default decides, and the display stops when a bar is full.
"""
import sys
import threading
import time

from dfc import config
from dfc.runtime.kernels.registry import host, kernel

ENV = "DFC_PROGRESS"
MIN_INTERVAL = 0.1      # seconds between updates passed to rich (per bar)


class Bar:
    __slots__ = ("task", "step", "total", "metrics", "shown_at", "dirty")

    def __init__(self, task):
        self.task, self.step, self.total, self.metrics = task, None, None, ""
        self.shown_at, self.dirty = float("-inf"), False     # the first update is always shown


class ProgressDisplay:
    """The process's progress bars (rich allows one live display at a time). Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._progress = None
        self._bars = {}
        self._live = False

    def _rich(self):
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[metrics]}"),
                                      console=Console(stderr=True))
        return self._progress

    def update(self, name, step, total, metrics):
        """Bar `name` is at `step` of `total`; metrics: name -> number."""
        text = " ".join(f"{k}={_fmt(v)}" for k, v in metrics.items())
        now = time.monotonic()
        with self._lock:
            prog = self._rich()
            if not self._live:
                prog.start()
                self._live = True
            bar = self._bars.get(name)
            if bar is None or (bar.step is not None and step < bar.step):
                if bar is not None:
                    prog.remove_task(bar.task)
                bar = self._bars[name] = Bar(prog.add_task(name, total=total, metrics=""))
            bar.step, bar.total, bar.metrics, bar.dirty = step, total, text, True
            if now - bar.shown_at >= MIN_INTERVAL or step >= total:
                self._show(bar, now)

    def _show(self, bar, now):
        self._progress.update(bar.task, completed=bar.step, total=bar.total, metrics=bar.metrics)
        bar.shown_at, bar.dirty = now, False

    def end_run(self):
        """Show every bar's last state and stop the display; drop the bars that finished."""
        with self._lock:
            if not self._live:
                return
            now = time.monotonic()
            for bar in self._bars.values():
                if bar.dirty:
                    self._show(bar, now)
            self._progress.stop()
            self._live = False
            for name, bar in list(self._bars.items()):
                if bar.step is not None and bar.total is not None and bar.step >= bar.total:
                    self._progress.remove_task(bar.task)
                    del self._bars[name]


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


_display = None
_display_lock = threading.Lock()


def display():
    """The process's ProgressDisplay."""
    global _display
    with _display_lock:
        if _display is None:
            _display = ProgressDisplay()
        return _display


def display_for_run(option=None):
    """The display a run updates, or None (bars off). option: True (on), False (off), None (on when stderr
    is a terminal; DFC_PROGRESS decides instead when set to on or off, see dfc/config.py)."""
    if option is None:
        option = config.env(ENV)
        if option == "auto":
            isatty = getattr(sys.stderr, "isatty", None)
            option = bool(isatty and isatty())
    return display() if option else None


@kernel("Progress")
def _progress(node, xp):
    name, metric_names = node.attrs["name"], node.attrs["metrics"]

    def f(ctx, a):
        d = getattr(ctx, "progress", None)
        auto = d == "auto"      # no run around this op (eager): the display stops when the bar is full
        if auto:
            d = display_for_run(None)
        if d is not None:
            step, total = host(a[0]).item(), host(a[1]).item()
            d.update(name, step, total, {m: host(v).item() for m, v in zip(metric_names, a[2:])})
            if auto and step >= total:
                d.end_run()
        return ()
    return f
