"""Tears down the local Ray a process started when that process dies, even by SIGKILL.

Ray kills the GCS and the raylet it started along with their parent (the
kernel's parent-death signal), but the processes the raylet starts (its
dashboard and runtime-env agents) outlive them, blocked on the dead GCS. So
`watch()` starts this file as a small process of its own (`python reaper.py
SESSION_DIR PID...`, the pids of the processes Ray started) whose stdin is a
pipe from the driver: the driver is the only writer, so the pipe's end of
file means the driver is gone, however it died. Until then the reaper notes,
once a second, every process below those pids (a few small /proc reads: a
process's children are listed under /proc/PID/task/TID/children); after, it
kills every noted process that still runs (checked by its start time, so a
reused pid is spared) and any process whose stdout or stderr is a file in the
session's directory, where Ray sends the output of the workers it starts.

Linux only (/proc); elsewhere `watch()` starts nothing. The reaper needs only
the standard library, so it starts without importing dfc. A child the driver
makes with a bare fork() holds the pipe too: the reaper then acts when the
last of them has ended.
"""
import os
import select
import signal
import subprocess
import sys
import time

REFRESH_SECONDS = 1.0       # how often the processes below Ray's are noted while the driver lives
SWEEPS = 20                 # kill rounds after the driver is gone (a worker may still be starting)
SWEEP_PAUSE = 0.1


class Watch:
    """The driver's end of a reaper process."""

    def __init__(self, process):
        self.process = process

    def release(self):
        """The Ray was shut down: the reaper kills what is left of it and ends."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass


def watch():
    """A reaper for the Ray this process just started; None where it cannot watch (no /proc, or Ray does
    not say which processes it started)."""
    import ray
    if not os.path.isdir("/proc"):
        return None
    try:
        node = ray._private.worker._global_node          # Ray has no public call for these
        roots = [str(info.process.pid) for infos in node.all_processes.values() for info in infos
                 if getattr(info, "process", None) is not None]
        p = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), node.get_session_dir_path(),
                              *roots], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    except (AttributeError, OSError):   # another Ray version's internals, or no process to spare
        return None
    return Watch(p)


def start_time(pid):
    """The process's start time (in clock ticks since boot), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def children(pid):
    found = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def note(known):
    """Forget the noted processes that ended, and note every live process below the others: pid -> start
    time."""
    for pid, started in list(known.items()):
        if start_time(pid) != started:
            del known[pid]
    todo = list(known)
    while todo:
        for child in children(todo.pop()):
            if child not in known:
                started = start_time(child)
                if started is not None:
                    known[child] = started
                    todo.append(child)


def session_processes(session):
    """Pids of the processes whose stdout or stderr is a file under `session`."""
    prefix = os.path.realpath(session) + os.sep
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        for fd in ("1", "2"):
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:     # gone, a zombie, or not ours
                continue
            if target.startswith(prefix):
                found.append(int(entry))
                break
    return found


def kill(known, session):
    for _ in range(SWEEPS):
        pids = [pid for pid, started in known.items() if start_time(pid) == started]
        pids += session_processes(session)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(SWEEP_PAUSE)


def main(session, roots):
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a Ctrl-C meant for the driver: it ends, then we act
    known = {pid: start_time(pid) for pid in roots}
    known = {pid: started for pid, started in known.items() if started is not None}
    while True:
        note(known)
        ready, _, _ = select.select([0], [], [], REFRESH_SECONDS)
        if ready:
            try:
                if not os.read(0, 1 << 16):
                    break
            except OSError:
                break
    kill(known, session)


if __name__ == "__main__":
    main(sys.argv[1], [int(pid) for pid in sys.argv[2:]])
