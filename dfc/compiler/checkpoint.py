"""dfc.Checkpoint: save Variables to a file and restore them, from inside a graph (Save / Restore ops).

    ckpt = dfc.Checkpoint({"w": w, "b": b})     # or a list of Variables: named after v.name
    ckpt.save("model.npz")        # in traced code: one Save node writing the variables' current values
    w_, b_ = ckpt.restore("model.npz")          # one Restore, an Assign per variable; returns the values
    ckpt.save("model.npz")        # outside any graph: writes the values in the container now

Equivalent Python when the graph runs:

    save:    numpy.savez(path, w=w.value, b=b.value)
    restore: with numpy.load(path) as z: w.value = z["w"]; b.value = z["b"]

Where dfc differs: the path is a string fixed when the graph is built (an attr
of the node), and it must end in ".npz" (numpy.savez would append the suffix
and numpy.load would then miss the file). A save is atomic (a temporary file
renamed over the old one), so a process killed mid-save keeps the previous
checkpoint; a restore reads one snapshot of the file (a save racing it cannot
mix two saves) and checks every value's dtype and shape against the variable's,
changing nothing if one is missing, differs or is damaged (in a graph too: one
Restore node reads all, and the Assigns take its outputs). A graph loaded from
JSON may only use paths relative to the session's checkpoint directory
(`Session(checkpoint_dir=...)`, `dfc run --checkpoint-dir`). Save and Restore are side effects,
so they run in program order with the variables' reads and assigns, inside
loops and branches too (a save at one iteration of an in-graph training loop).
"""
from dfc.compiler.tracing import current_builder, user_location
from dfc.runtime import checkpoints
from dfc.compiler.variables import Variable
from dfc.errors import DfcError


class Checkpoint:
    """A named set of Variables that traced code can save to and restore from a .npz file."""

    def __init__(self, variables):
        items = list(variables.items()) if isinstance(variables, dict) else [(v.name, v) for v in variables]
        names = [n for n, _ in items]
        if len(set(names)) != len(names):
            raise DfcError(f"checkpoint names must be unique, got {names} (pass a dict to name the variables)",
                           loc=user_location())
        for n, v in items:
            if not isinstance(v, Variable):
                raise DfcError(f"checkpoint entry {n!r} is {type(v).__name__}, not a dfc.Variable",
                               loc=user_location())
        self.variables = dict(items)

    def save(self, path):
        """Build a Save of every variable's current value to `path` (a .npz file)."""
        path = _checked(path)
        if current_builder(required=False) is None:
            _eager(checkpoints.save_npz, path, {n: v.numpy() for n, v in self.variables.items()})
            return path
        names = list(self.variables)
        values = [v.read_value() for v in self.variables.values()]
        current_builder().make("Save", values, {"path": path, "names": names})

    def restore(self, path):
        """Build Restore + Assign for every variable from `path`; return the restored values (a list)."""
        path = _checked(path)
        names, variables = list(self.variables), list(self.variables.values())
        if current_builder(required=False) is None:
            values = _eager(checkpoints.load_npz, path, [(n, v.dtype, v.shape) for n, v in self.variables.items()])
            return [v.assign(value) for v, value in zip(variables, values)]
        # one Restore node reads the file once and checks every entry; the Assigns take its outputs, so
        # none runs unless all are good
        values = current_builder().make("Restore", (), {"path": path, "names": names,
                                                         "dtypes": [v.dtype for v in variables],
                                                         "shapes": [list(v.shape) for v in variables]})
        return [v.assign(value) for v, value in zip(variables, values)]

    def __repr__(self):
        return f"<dfc.Checkpoint {list(self.variables)}>"


def _eager(fn, *args):
    try:
        return fn(*args)
    except OSError as e:
        raise DfcError(f"cannot save checkpoint {args[0]!r}: {e}", loc=user_location()) from None
    except DfcError as e:
        raise DfcError(e.message, loc=user_location()) from None


def _checked(path):
    path = str(path)
    if not path.endswith(".npz"):
        raise DfcError(f"checkpoint path {path!r} must end in .npz", loc=user_location())
    return path
