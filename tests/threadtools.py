"""A test step on another thread, and waiting for a state another thread reaches (shared by the queue tests)."""
import threading
import time


class Background:
    """fn() on a thread; .result() its value or raises its error; fails if it has not ended in wait_s."""

    def __init__(self, fn, wait_s=30):
        self.box, self.wait_s = {}, wait_s
        self.thread = threading.Thread(target=self._work, args=(fn,), daemon=True)
        self.thread.start()

    def _work(self, fn):
        try:
            self.box["value"] = fn()
        except BaseException as e:   # noqa: BLE001 — re-raised in the test's thread
            self.box["error"] = e

    def done(self):
        return not self.thread.is_alive()

    def result(self):
        self.thread.join(self.wait_s)
        assert not self.thread.is_alive(), "the background step never finished"
        if "error" in self.box:
            raise self.box["error"]
        return self.box["value"]


def until(cond, wait_s=30):
    """Wait until cond() holds (another thread reaches a state); fail if it never does."""
    deadline = time.monotonic() + wait_s
    while not cond():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.005)
