"""Checkpoint files: atomic .npz writes, checked reads, and the directory a graph's Save/Restore may touch.

A Save never leaves a half-written file behind: it writes a temporary file in
the same directory and renames it over the old checkpoint (os.replace is
atomic), so a process killed mid-save keeps the previous checkpoint. The
temporary's name carries its writer's host and pid; the next save in that
directory removes the temporaries of writers that are no longer alive.

A Restore reads one snapshot: it opens the file once (a concurrent save
renames a new file into place and leaves the open one whole) and checks every
variable's entry (present, a plain .npy of the variable's dtype and shape,
intact) before it returns any, so a bad entry changes no variable. It reads
each entry's .npy header before its data, so a file claiming more data than a
variable holds is refused before anything is allocated; it refuses files that
are not regular (a named pipe would block the open forever).

A graph loaded from a file is not trusted to choose paths: its Save/Restore
paths must be relative, without "..", and stay (after symlinks) inside the
checkpoint directory the user chose (default: the current directory).
"""
import math
import os
import re
import socket
import stat
import struct
import tempfile
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npy

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


# ---------------------------------------------------------------- saving
def _writer_tag():
    """This process's host and pid namespace, as characters safe in a file name (no '.')."""
    host = re.sub(r"[^A-Za-z0-9-]", "_", socket.gethostname())[:64]
    try:
        ns = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))    # pids of other namespaces mean nothing here
    except OSError:
        ns = ""
    return f"{host}-{ns}"


_TAG = _writer_tag()
_TEMPORARY = re.compile(r"\.dfc-save-(?P<tag>[A-Za-z0-9_-]*)\.(?P<pid>[0-9]{1,10})\.[A-Za-z0-9_]+\.npz\.tmp")


def save_npz(path, arrays):
    """Write `arrays` (name -> array) to the .npz file `path` atomically."""
    folder = os.path.dirname(path) or "."
    remove_stale_temporaries(folder)
    fd, tmp = tempfile.mkstemp(prefix=f".dfc-save-{_TAG}.{os.getpid()}.", suffix=".npz.tmp", dir=folder)
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


def remove_stale_temporaries(folder):
    """Delete the temporaries that saves killed mid-write (by this host, in this pid namespace) left in
    `folder`; a temporary whose writer still runs is left alone."""
    if os.name != "posix":          # os.kill(pid, 0) only asks whether a process lives on POSIX
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _TEMPORARY.fullmatch(name)
        if m is None or m["tag"] != _TAG or _alive(int(m["pid"])):
            continue
        full = os.path.join(folder, name)
        try:
            if stat.S_ISREG(os.lstat(full).st_mode):
                os.unlink(full)
        except OSError:
            pass                    # another save removed it first, or the folder is not ours to clean


def _alive(pid):
    if pid <= 0:
        return True                 # not a name this module made: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True                 # alive under another user, or no pid at all: keep
    return True


# ---------------------------------------------------------------- restoring
_CHUNK = 1 << 20                    # bytes read from a member at a time
_NPY_MAGIC = b"\x93NUMPY"
# what zipfile raises for a damaged archive or member: truncated, bad CRC, bad deflate stream, encrypted
_BROKEN = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, struct.error, NotImplementedError,
           RuntimeError, OverflowError)


def load_npz(path, entries, node=None):
    """The arrays of the .npz file `path` for `entries` (a list of (name, dtype, shape); a shape of None or a
    dim of None: any), read from one snapshot of the file and each checked before any is returned."""
    names = ", ".join(repr(n) for n, _, _ in entries) or "nothing"
    with _open_regular(path, names, node) as f:
        try:
            archive = zipfile.ZipFile(f)
        except _BROKEN as e:
            f.seek(0)
            what = ("a single .npy array (numpy.save), not a .npz archive (numpy.savez)"
                    if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC else f"not a .npz archive ({e})")
            raise DfcRuntimeError(f"cannot restore {names} from {path!r}: the file is {what}", node=node) from None
        with archive:
            members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
            for name, _, _ in entries:
                if name not in members:
                    raise DfcRuntimeError(f"checkpoint {path!r} has no variable {name!r} (it has "
                                          f"{', '.join(map(repr, members)) or 'nothing'})", node=node)
            return [_member(archive, members[name], name, np.dtype(dtype), shape, path, node)
                    for name, dtype, shape in entries]


def _open_regular(path, names, node):
    """`path` opened for reading, refused unless it is a regular file (without blocking on a named pipe)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise DfcRuntimeError(f"cannot restore {names} from {path!r}: {e.strerror or e}", node=node) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        os.close(fd)
        raise DfcRuntimeError(f"cannot restore {names} from {path!r}: {e.strerror or e}", node=node) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "a device")
        raise DfcRuntimeError(f"cannot restore {names} from {path!r}: not a regular file ({kind})", node=node)
    return os.fdopen(fd, "rb")


def _member(archive, info, name, want, shape, path, node):
    """The array in member `info`: its header is checked against the variable before any data is read,
    and no more bytes are read than the header declares."""
    def broken(why):
        return DfcRuntimeError(f"cannot restore {name!r} from {path!r}: {why}", node=node)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise broken(f"its member is compressed with method {info.compress_type} (numpy writes stored or "
                     f"deflated members)")
    try:
        with archive.open(info) as f:
            version = npy.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise broken(f"unsupported .npy format version {version[0]}.{version[1]}")
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            got_shape, fortran, got = read_header(f)
            if got.hasobject or got.name != want.name or (shape is not None and not _shape_fits(got_shape, shape)):
                raise DfcRuntimeError(
                    f"checkpoint {path!r} holds {name!r} as {'object' if got.hasobject else got.name}"
                    f"{list(got_shape)}, but the variable is {want.name}{'[?]' if shape is None else list(shape)}",
                    node=node)
            nbytes = math.prod(got_shape) * got.itemsize
            header = f.tell()
            if info.file_size != header + nbytes:
                raise broken(f"its header declares {nbytes} bytes of data, its archive entry "
                             f"{info.file_size - header}")
            exact = shape is not None and None not in shape
            data = _read(f, nbytes, exact)
            if len(data) != nbytes:
                raise broken(f"its data is cut short ({len(data)} of {nbytes} bytes)")
            if f.read(1):           # reading to the end also makes zipfile check the member's CRC
                raise broken("its member holds more data than its header declares")
    except DfcRuntimeError:
        raise
    except _BROKEN as e:
        raise broken(str(e) or type(e).__name__) from None
    value = np.frombuffer(data, dtype=got)
    value = value.reshape(got_shape[::-1]).T.copy() if fortran else value.reshape(got_shape)
    return value if got.isnative else value.astype(got.newbyteorder("="))


def _read(f, nbytes, exact):
    """Up to `nbytes` from `f`. exact: the variable's shape fixed nbytes, so allocate it at once; otherwise
    grow with the data actually there, so a header's claim alone allocates nothing."""
    if exact:
        buf = bytearray(nbytes)
        view, got = memoryview(buf), 0
        while got < nbytes:
            n = f.readinto(view[got:got + _CHUNK])
            if not n:
                break
            got += n
        view.release()
        del buf[got:]
        return buf
    buf = bytearray()
    while len(buf) < nbytes:
        chunk = f.read(min(_CHUNK, nbytes - len(buf)))
        if not chunk:
            break
        buf += chunk
    return buf


def _shape_fits(got, want):
    return len(got) == len(want) and all(w is None or w == g for g, w in zip(got, want))
