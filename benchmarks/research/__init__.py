"""Research programs written the way a user writes them with @dfc.function, each with numpy, JAX and
PyTorch versions computing the same thing; `python -m benchmarks.research` times them all (docs/benchmarks.md,
"Research programs"). One module per program; each has `cases(size)` -> [Case]."""
import importlib

MODULES = ("existing", "particle_filter", "seq2seq", "maml", "reinforce", "tree_lstm", "newton_logreg", "kmeans",
           "char_rnn", "ising_mh", "neural_ode")


def all_cases(size="bench"):
    out = []
    for name in MODULES:
        out += importlib.import_module(f"benchmarks.research.{name}").cases(size)
    return out


def case_names():
    """The case names in order, without building any inputs' competitors."""
    return [c.name for c in all_cases("tiny")]
