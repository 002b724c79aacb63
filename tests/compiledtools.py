"""Shared by the compiled-loop test modules."""
import pytest


@pytest.fixture(autouse=True)
def _no_compile_budget():
    """These tests are about compiled code: compile whatever the suite's DFC_COMPILE_BUDGET has left."""
    from dfc.runtime import compiled
    left = compiled._budget["left"]
    compiled._budget["left"] = float("inf")
    yield
    compiled._budget["left"] = left


@pytest.fixture
def frames_alone(monkeypatch):
    """Loop frames compile one by one (the whole run is not compiled as one function, compiled/root.py): for
    tests of what crosses in and out of a compiled frame, and of its statistics."""
    from dfc.runtime.compiled import root
    monkeypatch.setattr(root, "ENABLED", False)


@pytest.fixture
def without_jax(monkeypatch):
    """compile_loops="auto" as in a process without jax: no run compiles to XLA, so numba compiles the loop
    frames in the background (for the tests of that path; with jax it serves the runs XLA refuses)."""
    from dfc.runtime.xla import auto
    monkeypatch.setattr(auto, "available", lambda: False)
