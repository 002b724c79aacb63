"""`dfc.progress`: a progress bar driven from inside a graph (rich)."""
from dfc.compiler.tracing import convert, current_builder
from dfc.errors import DfcTypeError


def progress(step, total, /, name="progress", **metrics):
    """Show bar `name` at `step` of `total` steps done, with `metrics` after it, when the graph runs.

    A side effect in program order, like dfc.print; no result. Call it after step i with `i + 1`:

        for i in dfc.range(n):
            loss = train_step(...)
            dfc.progress(i + 1, n, loss=loss)        # [=====>    ] 40/100 0:00:02 loss=0.0213

    step, total and each metric are scalars (tensors or Python numbers). One bar per name; a step
    below the bar's last one starts it again. Bars appear on stderr when it is a terminal, or when the
    run asks for them: `Session(g, progress=True)`, `dfc run --progress`, DFC_PROGRESS=1
    (DFC_PROGRESS=0 or `progress=False` turns them off); otherwise the op does nothing.
    """
    ins = [convert(step), convert(total)]
    for what, t in zip(("step", "total"), ins):
        if t.dtype == "bool":
            raise DfcTypeError(f"dfc.progress {what} must be a number, got bool")
    names = list(metrics)
    ins += [convert(metrics[k]) for k in names]
    current_builder().make("Progress", ins, {"name": str(name), "metrics": names})
