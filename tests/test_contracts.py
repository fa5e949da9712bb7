"""The house's written contracts, checked in the quick tier: import-linter's contracts
(pyproject.toml) and ARCHITECTURE.md's inventory rows against the modules' own docstrings."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tomllib
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


# ----------------------------------------------------------------------------- the door's contract

CLOSED = "one way into every model"  # the start of the closed contract's name
FACTORY = "core.model.opened"  # the door's factory: the one module that imports the adapters
# Exempted edges that are not the factory's: debt, each to be paid by asking the door instead;
# this set may only shrink (issue 65 goal 7).
DEBT: set[str] = set()  # all paid: stream_terms' and resumed's read the door (``stream_layout``,
# ``output_positions``)
TRAINER = {"core.runs.training_run", "core.runs.recorder"}  # builds the studio's own models


def contracts() -> list[dict]:
    """pyproject.toml's import-linter contracts."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def closed_contract() -> dict:
    (found,) = [c for c in contracts() if c["name"].startswith(CLOSED)]
    return found


def test_the_door_is_closed_but_for_its_factory():
    """The adapters are forbidden to the analysis, the pages and the commands without indirect
    imports, and the only exempted edges are the factory's (and the named ``DEBT``)."""
    contract = closed_contract()
    assert contract["type"] == "forbidden"
    assert contract.get("allow_indirect_imports", False) is False
    ignored = set(contract["ignore_imports"])
    factory = {edge for edge in ignored if edge.split(" -> ")[0] == FACTORY}
    assert ignored - factory == DEBT, "an exempted edge that is neither the factory's nor debt"
    adapters = set(contract["forbidden_modules"])
    assert {edge.split(" -> ")[1] for edge in factory} <= adapters


def test_every_module_of_the_analysis_and_the_commands_is_a_source():
    """Every module of core.runs but the trainer's, and every command but the training one, is
    a source of the closed contract: a new module is covered without being named."""
    sources = set(closed_contract()["source_modules"])
    runs = {f"core.runs.{p.stem}" for p in (ROOT / "core" / "runs").glob("*.py")} - {
        "core.runs.__init__"
    }
    assert runs - TRAINER <= sources, sorted(runs - TRAINER - sources)
    top = {n.strip() for n in contracts()[0]["layers"][0].split("|")}
    assert {f"core.{c}" for c in top - {"train"}} <= sources
    packages = {"core.attention", "core.attribution", "core.alignment", "core.figures"}
    assert packages | {"core.measure", "pages"} <= sources
