"""Compiling a frame in a child process while the fused path keeps running it (compile_loops="auto").

numba compiles in the calling thread and holds the GIL for most of it, so a compile inside the process
would stall every thread of a run for seconds to minutes. With compile_loops="auto" a frame that has run
long enough on the fused path gets a child Python process instead:

    python -m dfc.runtime.compiled.background MODULE.py     (the pickled numba argument types on stdin)

which runs the frame's generated module (cache.py wrote it; the child runs it only if it lies in the
private cache dir and its content gives the key in its name) and compiles its `run` for those types with
cache=True, so the machine code lands in the disk cache. Meanwhile the parent runs the frame fused; on a
call after the child has exited successfully it loads the machine code from the cache (well under a
second) and runs compiled from then on. A child that fails leaves the frame fused for the rest of the
process (`Job.error` keeps the end of its stderr; `stats()` in __init__.py reports it). Without a disk
cache (cache.py refused the directory) no child starts: the Job fails at once and the frame stays fused.

Children run at the parent's own priority. They used to run at nice 10, and on a busy machine (other
processes at nice 0 on every core) such a child got a few percent of a core and did not finish a 20-s
compile in minutes: the program ran fused all along. A compile is work the program needs, as JAX's is (JAX
compiles in the calling thread): at the same priority it takes its fair share, one core at most (numba
compiles in one thread), and on a machine with a core to spare it costs the running program nothing.
While the child runs, the frame's fused runs skip everything the compiled code would need (its arguments
and stand-ins), so they run as fast as before it started (CompiledFrame.fn).

Children are terminated when the parent exits, so a short program does not leave compilers behind; a frame
whose child finished is in the disk cache for every later process.
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
        from dfc.runtime.compiled import cache
        self.frame, self.started = frame, time.perf_counter()
        self.seconds = None         # wall time the child took, once it ended
        self.error = None           # the end of its stderr if it failed
        self._proc = self._err = None
        d = cache.cache_dir()
        if d is None or os.path.dirname(module_path) != d:
            self.seconds, self.error = 0.0, (f"{module_path} is not in a private disk cache, which a child "
                                             "process needs to hand its machine code over (see cache.py)")
            return
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen([sys.executable, "-m", "dfc.runtime.compiled.background", module_path],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._err,
                                      env=env)
        try:                        # a pipe, not a file in a shared temporary directory
            self._proc.stdin.write(pickle.dumps(types))
            self._proc.stdin.close()
        except OSError:             # the child died already: poll() reports its stderr
            pass

    def poll(self):
        """None while the child runs; then True (compiled into the cache) or False (failed: see .error)."""
        if self._proc is None:
            return False
        rc = self._proc.poll()
        if rc is None:
            return None
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
            if rc != 0:
                self._err.seek(0)
                self.error = self._err.read()[-2000:].decode(errors="replace") or f"exit status {rc}"
            self._err.close()
        return rc == 0

    def stop(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._err is not None:
            self._err.close()


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


def _main(module_path):
    from dfc.runtime.compiled import cache
    types = pickle.load(sys.stdin.buffer)
    try:
        run = cache.load_file(module_path)
    except cache.Refused as e:
        sys.exit(f"dfc background compile: {e}")
    run.compile(types)


if __name__ == "__main__":
    _main(sys.argv[1])
