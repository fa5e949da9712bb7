"""The house: core's layers, no import cycles, no Streamlit in core, commands in place."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
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
BASICS = ("places", "config_fields", "command_line", "cpu_load")  # the floors under every layer
FACADES = ("notebook",)  # beside the commands at the top: the same library calls, for Python


def find_commands() -> tuple[str, ...]:
    """The commands, found by a rule: the modules at the top of ``core`` with a ``main`` that
    calls ``run_command`` and runs as a script (``python -m core.<command>``)."""
    found = []
    for path in sorted((ROOT / "core").glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        if mains and 'if __name__ == "__main__":' in text:
            found.append(path.stem)
    return tuple(found)


COMMANDS = find_commands()


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


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_layers_below_it(layer):
    """The same rule read from the source, so it holds where import-linter is not installed."""
    above = set(LAYERS[: LAYERS.index(layer)]) | set(COMMANDS) | set(FACADES)
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


def test_the_top_of_core_holds_the_commands_and_the_basics_only():
    """Every module at the top of ``core`` is a command, a basic or the notebook's facade, and
    pyproject's layers name the same commands beside the facade (a command added is found, a
    stray module is not one)."""
    tops = {p.stem for p in (ROOT / "core").glob("*.py")} - {"__init__"}
    known = set(COMMANDS) | set(BASICS) | set(FACADES)
    assert tops == known, tops ^ known
    assert len(COMMANDS) >= 10 and "trajectories" in COMMANDS
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    top, *_, basics, floor = layers["contracts"][0]["layers"]
    assert {n.strip() for n in top.split("|")} == set(COMMANDS) | set(FACADES)
    assert {n.strip() for n in basics.split("|")} | {floor} == set(BASICS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_is_thin_and_uses_the_one_main(command):
    """Flags and one library call; parse, run, print and errors through ``run_command``."""
    path = ROOT / "core" / f"{command}.py"
    tree = ast.parse(path.read_text())
    (main,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    calls = {n.func.id for n in ast.walk(main) if isinstance(n, ast.Call) and hasattr(n.func, "id")}
    assert "run_command" in calls, f"{command}.main does not call run_command"
    assert "print(" not in ast.get_source_segment(path.read_text(), main)
    assert len(path.read_text().splitlines()) <= 120


HELP = """
import contextlib, io, runpy, sys
for name in sys.argv[1:]:
    sys.argv, out, code = [name, "--help"], io.StringIO(), None
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module("core." + name, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code
    print(name, code, "usage:" in out.getvalue())
"""


def test_commands_stay_where_users_call_them():
    """``python -m core.<command> --help`` of every command answers with its usage (run as
    ``-m`` runs them, all in one process)."""
    done = subprocess.run(
        [sys.executable, "-c", HELP, *COMMANDS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [line.split() for line in done.stdout.splitlines()]
    assert answers == [[c, "0", "True"] for c in COMMANDS], done.stdout


def test_every_core_module_says_what_it_is():
    """A one-line docstring on every module: a newcomer finds a concept from the tree."""
    for path in sorted((ROOT / "core").rglob("*.py")):
        if path.name != "__init__.py":
            assert ast.get_docstring(ast.parse(path.read_text())), path


def test_architecture_md_is_the_one_inventory():
    """Every module under core/ and pages/ is named in ARCHITECTURE.md, and every module it
    names exists: one inventory that cannot drift."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    modules = {
        p.relative_to(ROOT).as_posix()
        for base in ("core", "pages")
        for p in (ROOT / base).rglob("*.py")
        if p.name != "__init__.py"
    }
    named = set(re.findall(r"`((?:core|pages)/[\w/]+\.py)`", text))
    assert modules - named == set(), "not in ARCHITECTURE.md"
    assert named - modules == set(), "named in ARCHITECTURE.md but gone"
