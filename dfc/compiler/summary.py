"""`dfc.summary`: TensorBoard summaries written from inside a graph (as tf.summary in a tf.function).

    writer = dfc.summary.create_file_writer("logs/run1")
    with writer.as_default():           # runs started in this thread write here
        train(x, y)                     # a dfc.function whose loop calls dfc.summary.scalar

    @dfc.function
    def train(x, y):
        for step in dfc.range(100):
            loss = ...
            dfc.summary.scalar("loss", loss, step)
            dfc.summary.histogram("w", w, step)

The summary ops are side effects in program order (like dfc.print). Where a
run writes is decided when the run starts, not when the graph is traced, so a
saved graph writes wherever its runner says: `Session(g, summary_dir=...)`,
else the innermost `writer.as_default()` of the calling thread, else the
environment variable DFC_SUMMARY_DIR (`DFC_SUMMARY_DIR=logs dfc run g.json`),
else nowhere (the ops then return False). Open the directory with
`tensorboard --logdir logs`. Events are written by tensorboardX
(`pip install 'dfc[summary]'`) and flushed at the end of every run.

Differences from tf.summary: `step` is required (there is no
`tf.summary.experimental.set_step`); one writer, and one event file, per
directory per process (`create_file_writer` of the same directory returns
the same writer); no `record_if`, images, audio or text.
"""
from dfc.compiler.tracing import convert, current_builder
from dfc.errors import DfcTypeError
from dfc.runtime.kernels.summary_kernels import FileWriter, default_writer, writer

__all__ = ["scalar", "histogram", "create_file_writer", "FileWriter", "default_writer"]


def create_file_writer(logdir):
    """The summary writer of directory `logdir` (made on first use, with the directory, when the first
    event is written). Use `with writer.as_default():` around the runs that should write there;
    `writer.flush()` / `writer.close()` as in tf.summary."""
    return writer(logdir)


def _step(step):
    s = convert(step)
    if s.dtype not in ("int32", "int64"):
        raise DfcTypeError(f"summary step must be an integer (int32 or int64), got {s.dtype}")
    return s


def scalar(name, value, step):
    """Write scalar `value` under tag `name` at `step` (an integer) when the graph runs.

    Returns a bool scalar tensor: True if a writer took the value, False if the run has no writer."""
    v = convert(value)
    if v.dtype == "bool":
        from dfc.compiler.ops_api import cast
        v = cast(v, "float32")
    return current_builder().make1("SummaryScalar", (_step(step), v), {"tag": str(name)})


def histogram(name, values, step):
    """Write a histogram of `values` (a tensor of any shape; finite) under tag `name` at `step` when the
    graph runs (TensorFlow's bucketing). Returns a bool scalar tensor, as `scalar` does."""
    return current_builder().make1("SummaryHistogram", (_step(step), convert(values)), {"tag": str(name)})
