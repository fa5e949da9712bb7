"""The house: core's layers, no import cycles, no Streamlit in core, commands in place."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = (
    "figures",
    "alignment",
    "attribution",
    "attention",
    "runs",
    "training",
    "model",
    "corpus",
)  # top to bottom
COMMANDS = (
    "train",
    "translate",
    "evaluate",
    "ablate",
    "checkpoint",
    "attribute",
    "align",
    "runs_table",
    "inside_head",
)


def imported_core_packages(path: Path) -> set[str]:
    """The core subpackages (or top-level modules) a file imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("core.")}
    return found


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_import_linter_contracts_are_kept():
    """The contracts of pyproject.toml: layers, engine apart from runs, no cycles, no Streamlit."""
    done = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "BROKEN" not in done.stdout and done.stdout.count("KEPT") >= 4


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_layers_below_it(layer):
    """The same rule read from the source, so it holds where import-linter is not installed."""
    above = set(LAYERS[: LAYERS.index(layer)]) | set(COMMANDS)
    for path in (ROOT / "core" / layer).glob("*.py"):
        wrong = imported_core_packages(path) & above
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}, a higher layer"


def test_the_engine_never_imports_runs_or_the_app():
    for layer in ("corpus", "model", "training"):
        for path in (ROOT / "core" / layer).glob("*.py"):
            text = path.read_text()
            assert "streamlit" not in text and "from pages" not in text, path
            assert not imported_core_packages(path) & {
                "runs",
                "attention",
                "attribution",
                "alignment",
                "figures",
            }, path


@pytest.mark.parametrize("command", COMMANDS)
def test_commands_stay_where_users_call_them(command):
    """``python -m core.<command> --help`` works and the module is thin (flags and a call)."""
    done = subprocess.run(
        [sys.executable, "-m", f"core.{command}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]
    assert len((ROOT / "core" / f"{command}.py").read_text().splitlines()) <= 120


def test_every_core_module_says_what_it_is():
    """A one-line docstring on every module: a newcomer finds a concept from the tree."""
    for path in sorted((ROOT / "core").rglob("*.py")):
        if path.name != "__init__.py":
            assert ast.get_docstring(ast.parse(path.read_text())), path
