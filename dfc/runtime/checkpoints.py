"""Checkpoint files: atomic .npz writes, checked reads, and the directory a graph's Save/Restore may touch.

A Save never leaves a half-written file behind: it writes a temporary file in
the same directory and renames it over the old checkpoint (os.replace is
atomic), so a process killed mid-save keeps the previous checkpoint. A
Restore checks the stored dtype and shape against the variable's.

A graph loaded from a file is not trusted to choose paths: its Save/Restore
paths must be relative, without "..", and stay (after symlinks) inside the
checkpoint directory the user chose (default: the current directory).
"""
import os
import tempfile
import zipfile

import numpy as np

from dfc.errors import DfcGraphError, DfcRuntimeError

CHECKPOINT_OPS = ("Save", "Restore")


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()


class Directory:
    """Where a session's Save/Restore paths go.

    confined=False (a graph traced in this process, no checkpoint_dir given):
    paths are used as the program wrote them. confined=True: relative paths
    only, resolved under `base`."""

    def __init__(self, base=None, confined=False):
        self.confined = confined or base is not None
        self.base = os.path.realpath(base if base is not None else os.getcwd()) if self.confined else None

    def resolve(self, path, node=None):
        """The file a Save/Restore of `path` touches; a DfcGraphError if it leaves the directory."""
        if not self.confined:
            return path
        parts = path.replace("\\", "/").split("/")
        if os.path.isabs(path) or path.startswith(("/", "\\")) or ".." in parts or "\0" in path:
            raise DfcGraphError(f"checkpoint path {path!r} must be relative to the checkpoint directory and "
                                f"may not contain '..' (set the directory with Session(checkpoint_dir=...) "
                                f"or `dfc run --checkpoint-dir`)", node=node)
        full = os.path.realpath(os.path.join(self.base, path))
        if os.path.commonpath([full, self.base]) != self.base:
            raise DfcGraphError(f"checkpoint path {path!r} leaves the checkpoint directory {self.base} "
                                f"(through a symbolic link)", node=node)
        return full


def check_graph(graph, directory):
    """Refuse, before anything runs, a graph whose Save/Restore paths leave `directory`."""
    for node in graph.nodes.values():
        if node.op in CHECKPOINT_OPS:
            directory.resolve(node.attrs["path"], node.name)


def save_npz(path, arrays):
    """Write `arrays` (name -> array) to the .npz file `path` atomically."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".dfc-save-", suffix=".npz.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_entry(path, name, dtype, shape, node=None):
    """The array `name` of the .npz file `path`, which must have this dtype and shape (None: any)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if name not in z.files:
                raise DfcRuntimeError(f"checkpoint {path!r} has no variable {name!r} (it has "
                                      f"{', '.join(map(repr, z.files)) or 'nothing'})", node=node)
            value = z[name]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DfcRuntimeError(f"cannot restore {name!r} from {path!r}: {e}", node=node) from None
    if value.dtype.name != np.dtype(dtype).name or (shape is not None and not _shape_fits(value.shape, shape)):
        raise DfcRuntimeError(f"checkpoint {path!r} holds {name!r} as {value.dtype.name}{list(value.shape)}, but "
                              f"the variable is {np.dtype(dtype).name}"
                              f"{'[?]' if shape is None else list(shape)}", node=node)
    return value


def _shape_fits(got, want):
    return len(got) == len(want) and all(w is None or w == g for g, w in zip(got, want))
