"""Compiling a frame in a child process while the fused path keeps running it (compile_loops="auto").

numba compiles in the calling thread and holds the GIL for most of it, so a compile inside the process
would stall every thread of a run for seconds to minutes. With compile_loops="auto" a frame that has run
long enough on the fused path gets a child Python process instead:

    python -m dfc.runtime.compiled.background MODULE.py TYPES.pkl

which imports the frame's generated module (cache.py wrote it) and compiles its `run` for the pickled
numba argument types with cache=True, so the machine code lands in the disk cache. Meanwhile the parent
runs the frame fused; on a call after the child has exited successfully it loads the machine code from the
cache (well under a second) and runs compiled from then on. A child that fails leaves the frame fused for
the rest of the process (`Job.error` keeps the end of its stderr; `stats()` in __init__.py reports it).

Children run at lower priority (nice 10) and are terminated when the parent exits, so a short program does
not leave compilers behind; a frame whose child finished is in the disk cache for every later process.
"""
import atexit
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time

_lock = threading.Lock()
_jobs = []


class Job:
    """One child compiling one frame's module for one argument signature."""

    def __init__(self, module_path, types, frame):
        self.frame, self.started = frame, time.perf_counter()
        self.seconds = None         # wall time the child took, once it ended
        self.error = None           # the end of its stderr if it failed
        fd, self._types_path = tempfile.mkstemp(prefix="dfc-types-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(types, f)
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen([sys.executable, "-m", "dfc.runtime.compiled.background", module_path,
                                       self._types_path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=self._err, env=env)

    def poll(self):
        """None while the child runs; then True (compiled into the cache) or False (failed: see .error)."""
        rc = self._proc.poll()
        if rc is None:
            return None
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
            if rc != 0:
                self._err.seek(0)
                self.error = self._err.read()[-2000:].decode(errors="replace") or f"exit status {rc}"
            self._cleanup()
        return rc == 0

    def stop(self):
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._cleanup()

    def _cleanup(self):
        try:
            os.unlink(self._types_path)
        except OSError:
            pass
        self._err.close()


def _lower_priority():
    try:
        os.nice(10)
    except OSError:
        pass


def start(module_path, types, frame):
    """A Job compiling `module_path`'s run for `types` (a tuple of numba types) in a child process."""
    job = Job(module_path, types, frame)
    with _lock:
        _jobs.append(job)
    return job


@atexit.register
def _stop_all():
    with _lock:
        jobs = list(_jobs)
    for job in jobs:
        job.stop()


def _main(module_path, types_path):
    _lower_priority()           # here, not as Popen's preexec_fn (unsafe in a process with threads)
    import importlib.util
    with open(types_path, "rb") as f:
        types = pickle.load(f)
    name = os.path.splitext(os.path.basename(module_path))[0]
    spec = importlib.util.spec_from_file_location(name, module_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.run.compile(types)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
