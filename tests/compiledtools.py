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
