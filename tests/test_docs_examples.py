"""The Python examples of the README and the docs pages run: each page's ```python blocks, in order, as one
script in a fresh process (a page's later blocks use what its earlier ones defined), in a temporary
directory (examples write files such as collatz.json)."""
import os
import re
from pathlib import Path

import pytest

from tests import clitools

ROOT = Path(clitools.ROOT)
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# distributed.md starts a local Ray cluster (tens of seconds); the cluster suites run with DFC_TEST_CLUSTER=1
NEEDS_CLUSTER = {"distributed.md"}
# performance.md's subject is compiled loops, which run on CPU devices only
ON_HOST = {"performance.md"}


def pages_with_examples():
    return [p for p in PAGES if BLOCK.search(p.read_text())]


def script(page):
    return "\n".join(f"# --- {page.name}, example {i + 1}\n{b}" for i, b in enumerate(BLOCK.findall(page.read_text())))


def test_the_example_pages_are_found():
    names = {p.name for p in pages_with_examples()}
    assert {"README.md", "control-flow.md", "gradients.md", "performance.md"} <= names


@pytest.mark.parametrize("page", pages_with_examples(), ids=lambda p: p.name)
def test_examples_run(page, tmp_path):
    if page.name in NEEDS_CLUSTER and os.environ.get("DFC_TEST_CLUSTER") != "1":
        pytest.skip("starts a Ray cluster: run with DFC_TEST_CLUSTER=1")
    path = tmp_path / "examples.py"
    path.write_text(script(page))
    env = {"DFC_TEST_DEVICE": "cpu"} if page.name in ON_HOST else None
    r = clitools.python(path, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, f"{page.name}: its examples fail:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
