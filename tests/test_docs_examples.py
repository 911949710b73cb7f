"""Every code example the docs mark runnable runs, page by page (docs/**/*.md).

A ```python block right after a ``<!-- runnable -->`` line is run; the blocks of one page share
one namespace, in page order, as a reader would type them. They run on ``memory://`` or on the
default ``file://`` store, here under a temporary directory. Code a guide shows from
``sample_projects/`` is included from the files themselves (``--8<--``) and tested by the
sample projects' own tests.
"""

from __future__ import annotations

import re
import sys
import tempfile
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```$", re.M | re.S)
FENCE = re.compile(r"^```python\n", re.M)


def runnable_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


PAGES = sorted(p for p in DOCS.rglob("*.md") if runnable_blocks(p))


def test_the_docs_have_runnable_examples() -> None:
    # The pattern above finds them: a page reworded so that none match would test nothing.
    assert len(PAGES) >= 3
    assert sum(len(runnable_blocks(p)) for p in PAGES) >= 10


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_runnable_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # LockKit() with no URL is file:// under the temp dir: keep it in this test's directory.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # A module of its own in sys.modules, as a script has (dataclasses look their module up).
    module = types.ModuleType(f"docs_example_{page.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for number, code in enumerate(runnable_blocks(page), 1):
        compiled = compile(code, f"{page.relative_to(DOCS)} (example {number})", "exec")
        exec(compiled, namespace)
