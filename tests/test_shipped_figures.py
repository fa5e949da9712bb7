"""No figure of the shipped models changed: every command's numbers and the pages' maps, as
captured before the one-interface change (``tests/shipped_figures.py``), computed again."""

from __future__ import annotations

import json

import pytest

from tests import shipped_figures
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # about 35 s: every method, faithfulness, importance, patching

BEFORE = json.loads(shipped_figures.OUT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def after():
    """Every figure computed now (the corpus's cases only where FRA_ENG_ZIP is set)."""
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return shipped_figures.capture()
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_figure_is_what_it_was(after, name):
    if name not in after:
        pytest.skip("needs the real corpus (FRA_ENG_ZIP)")
    problems = shipped_figures.differences(BEFORE[name], after[name], name)
    assert not problems, "\n".join(problems[:10])


def test_the_capture_can_tell_a_change():
    changed = json.loads(json.dumps(BEFORE["attribute alti 0"]))
    changed[0]["contributions"][1][0] += 0.01
    assert shipped_figures.differences(BEFORE["attribute alti 0"], changed)
