"""The house's written contracts, checked in the quick tier: import-linter's contracts
(pyproject.toml) and ARCHITECTURE.md's inventory rows against the modules' own docstrings."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `((?:core|pages)/[\w/]+\.py)` \| (.*) \|$")


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_import_linter_contracts_are_kept():
    """The contracts of pyproject.toml: layers, engine apart from runs, no cycles, no Streamlit,
    one way into every model (under a second: the quick tier runs it)."""
    done = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "BROKEN" not in done.stdout and done.stdout.count("KEPT") >= 4


def first_paragraph(source: str) -> str:
    """A module's docstring's first paragraph as ARCHITECTURE.md writes it: one line,
    ``double backticks`` as single ones, no final period."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    line = " ".join(doc.split("\n\n")[0].split()).replace("``", "`")
    return line.removesuffix(".")


def module_paragraph(path: str) -> str:
    """``first_paragraph`` of a module, by its path in the repository."""
    return first_paragraph((ROOT / path).read_text())


def architecture_rows() -> list[tuple[str, str]]:
    """ARCHITECTURE.md's inventory (its rows after "## Inventory"): each row
    ``| `path` | what it is |`` as (path, what it is)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    inventory = text[text.index("\n## Inventory\n") :]
    return [found.groups() for line in inventory.splitlines() if (found := ROW.match(line))]


# Rows allowed to differ from their module's first paragraph: none since issue 65's phase P0;
# a row that must differ for a while is named here, and leaves again.
ROWS_DIFFERING: set[str] = set()


def test_architecture_rows_are_the_modules_first_paragraphs():
    """Each inventory row of ARCHITECTURE.md is its module's docstring's first paragraph
    (``first_paragraph``): the module says what it is, the inventory repeats it, and neither
    drifts. A row allowed to differ that matches again leaves ``ROWS_DIFFERING``."""
    rows = dict(architecture_rows())
    assert len(rows) >= 200, "the inventory's rows were not found"
    differing = {p for p, text in rows.items() if text != module_paragraph(p)}
    new = {p: (rows[p], module_paragraph(p)) for p in sorted(differing - ROWS_DIFFERING)}
    assert not new, "\n".join(f"{p}\n  row: {r}\n  doc: {d}" for p, (r, d) in new.items())
    assert not ROWS_DIFFERING - differing, f"they match now: remove {ROWS_DIFFERING - differing}"


def test_each_module_has_one_row():
    paths = [p for p, _ in architecture_rows()]
    assert len(paths) == len(set(paths)), sorted(p for p in paths if paths.count(p) > 1)


def test_a_first_paragraph_is_read_as_the_rows_write_it():
    source = '"""A ``thing``: one\n    line, v0.5.\n\nMore."""\n\nx = 1\n'
    assert first_paragraph(source) == "A `thing`: one line, v0.5"
    assert first_paragraph("x = 1\n") == ""
