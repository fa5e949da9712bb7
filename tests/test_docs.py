"""The documentation a newcomer reads: a README that fits on a page, and links that lead
somewhere (files, and headings inside them)."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "bench" / "README.md"]
DOCS += sorted((ROOT / "docs").glob("*.md"))


def anchors(path) -> set[str]:
    """The GitHub anchors of a Markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_readme_fits_on_a_page():
    """At most 150 lines, about five minutes' reading (issue 65); detail lives in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_every_link_between_the_docs_leads_somewhere():
    for doc in DOCS:
        prose = re.sub(r"`[^`\n]*`", "", doc.read_text())  # code spans hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if target.startswith(("http://", "https://")):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            assert path.exists(), f"{doc.name}: {target}"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path), f"{doc.name}: {target}"


def test_every_command_is_in_the_commands_page():
    """docs/commands.md lists every ``python -m core.<command>`` (found by the commands' rule:
    a module at the top of core with a main)."""
    import ast

    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    commands = [
        path.stem
        for path in sorted((ROOT / "core").glob("*.py"))
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "main"
            for node in ast.parse(path.read_text(encoding="utf-8")).body
        )
    ]
    assert len(commands) >= 13
    missing = [c for c in commands if f"python -m core.{c} " not in page]
    assert not missing, missing
