"""Everything that RUNS graphs. Imports dfc.ir, never dfc.compiler."""
from dfc.runtime.session import Session

__all__ = ["Session"]
