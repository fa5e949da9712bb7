"""eflomal as the teacher of alignment-supervised training (issue 52, item 1): the aligner run
on the training pairs both ways, symmetrised, cached per corpus, offered by the command and
the Train form. eflomal itself (GPLv3, compiled) is not a dependency: a stand-in program that
writes what eflomal writes checks the plumbing; the real one, where installed, its output."""

from __future__ import annotations

import json
import stat
import sys
import textwrap

import pytest

from core.alignment import eflomal_teacher as ef
from core.alignment.aer import grow_diag_final_and
from core.alignment.teacher import read_source
from core.corpus.supervision import read_supervision
from core.places import runs_root
from core.runs.alignment_request import (
    AlignmentChoice,
    alignment_problems,
    requested_alignment,
    stage_alignment,
)
from core.runs.eflomal_program import EFLOMAL, PROGRAM_ENV, eflomal_program
from core.runs.run_dir import RunDir
from tests import helpers
from tests.test_align_supervision import tiny_pairs

STAND_IN = """\
#!{python}
# eflomal-align's command line; forward links i-i, backward links i-i and the last words
import pathlib, sys
args = sys.argv[1:]
flag = lambda name: args[args.index(name) + 1]
pathlib.Path(flag("-i") + ".calls").open("a").write("x")
if "{fail}":
    sys.exit("{fail}")
fwd, rev = [], []
for line in open(flag("-i"), encoding="utf-8"):
    src, tgt = (side.split() for side in line.split(" ||| "))
    n, m = len(src), len(tgt)
    same = [f"{{i}}-{{i}}" for i in range(min(n, m))]
    fwd.append(" ".join(same))
    rev.append(" ".join(same + [f"{{n - 1}}-{{m - 1}}"]))
open(flag("-f"), "w").write("\\n".join(fwd) + "\\n")
open(flag("-r"), "w").write("\\n".join(rev) + "\\n")
"""


def stand_in(folder, fail: str = "") -> str:
    """An executable that answers eflomal-align's command line (exits with ``fail`` if set)."""
    path = folder / "eflomal-align"
    path.write_text(textwrap.dedent(STAND_IN).format(python=sys.executable, fail=fail))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def fake_eflomal(tmp_path, monkeypatch):
    """The stand-in eflomal as $ATTENTION_STUDIO_EFLOMAL, runs in a temporary folder; returns
    a function counting its calls."""
    monkeypatch.setenv(PROGRAM_ENV, stand_in(tmp_path))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    calls = []
    real = ef.run_eflomal

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ef, "run_eflomal", counted)
    return lambda: len(calls)


def expected(pairs) -> list[set]:
    """What the stand-in's two directions symmetrise to."""
    out = []
    for s, t in pairs:
        same = {(i, i) for i in range(min(len(s), len(t)))}
        out.append(grow_diag_final_and(same, same | {(len(s) - 1, len(t) - 1)}, len(s), len(t)))
    return out


def test_both_directions_are_symmetrised_and_kept_per_corpus(fake_eflomal):
    pairs = tiny_pairs()
    fractions = []
    links = ef.eflomal_links(pairs, fractions.append)
    assert links == expected(pairs) and fractions[-1] == 1.0
    assert any(
        (len(s) - 1, len(t) - 1) in k and len(s) != len(t) for (s, t), k in zip(pairs, links)
    )
    kept = ef.cache_file(pairs)
    assert kept.parent == runs_root() / ".eflomal" and len(kept.read_text().splitlines()) == 30
    assert ef.eflomal_links(pairs) == links and fake_eflomal() == 1  # from the cache
    ef.eflomal_links(pairs[:10])
    assert fake_eflomal() == 2  # other pairs, another alignment


def test_the_cache_keeps_what_fits_and_drops_the_oldest(fake_eflomal, monkeypatch):
    pairs = tiny_pairs()
    ef.eflomal_links(pairs[:10])
    first = ef.cache_file(pairs[:10])
    monkeypatch.setattr(ef, "CACHE_BYTES", first.stat().st_size * 3 // 2)
    ef.eflomal_links(pairs[10:20])
    assert not first.exists() and ef.cache_file(pairs[10:20]).exists()
    monkeypatch.setattr(ef, "CACHE_BYTES", 5)
    ef.eflomal_links(pairs)  # larger than the whole cache: used, not kept
    assert not ef.cache_file(pairs).exists()


def test_a_missing_or_failing_eflomal_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv(PROGRAM_ENV, str(tmp_path / "nowhere"))
    assert eflomal_program() is None
    with pytest.raises(ef.EflomalError, match="pip install eflomal"):
        ef.eflomal_links(tiny_pairs())
    (problem,) = alignment_problems(AlignmentChoice(teacher=EFLOMAL), {})
    assert "eflomal is not installed" in problem
    monkeypatch.setenv(PROGRAM_ENV, stand_in(tmp_path, fail="out of memory"))
    assert alignment_problems(AlignmentChoice(teacher=EFLOMAL), {}) == []
    with pytest.raises(ef.EflomalError, match=r"eflomal failed \(exit 1\): out of memory"):
        ef.eflomal_links(tiny_pairs())


def test_the_choice_reaches_the_trainer_as_a_word_not_a_path(fake_eflomal, tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.create()
    train = {"align_weight": 0.0}
    asked = stage_alignment(rd, AlignmentChoice(teacher=EFLOMAL), train)
    assert asked == {"teacher": "eflomal"} and train["align_weight"] == 0.05
    rd.request.write_text(json.dumps({"settings": {}, "alignment": asked}))
    assert requested_alignment(rd) == ("eflomal", None, None)


@pytest.mark.slow  # trains with the command
def test_the_command_trains_a_head_on_eflomals_alignments(fake_eflomal, tmp_path):
    out = tmp_path / "aligned"
    assert helpers.train_tiny(out, "--align-teacher", "eflomal", "--epochs", "2") == 0
    train = json.loads((out / "config.json").read_text())["train"]
    source = "eflomal (grow-diag-final-and) on the 30 training pairs"
    assert train["align_source"] == f"{source}; 30 pairs aligned" and train["align_weight"] == 0.05
    assert read_source(out / "alignments.txt") == source
    lines = read_supervision(out / "alignments.txt")
    assert len(lines) == 30 and fake_eflomal() == 1


def test_the_command_without_eflomal_fails_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(PROGRAM_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    assert helpers.train_tiny(tmp_path / "r", "--align-teacher", "eflomal") == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "pip install eflomal" in err and err.count("\n") == 1


def test_the_train_form_offers_eflomal_and_says_when_it_is_missing(jobs_env, monkeypatch):
    from tests.test_app_train import train_page

    monkeypatch.setenv(PROGRAM_ENV, str(jobs_env["runs"] / "nowhere"))
    at = train_page()
    at.radio(key="align_from").set_value("eflomal").run()
    assert any("pip install eflomal" in w.value for w in at.warning)
    monkeypatch.setenv(PROGRAM_ENV, stand_in(jobs_env["runs"].parent))
    at.run()
    assert not any("pip install eflomal" in w.value for w in at.warning)
    assert any("grow-diag-final-and" in c.value for c in at.caption)
    import pages.ui.train.alignment_inputs as inputs

    monkeypatch.setattr(inputs.st, "session_state", {"align_from": at.session_state["align_from"]})
    assert inputs.alignment_choice() == AlignmentChoice(teacher=EFLOMAL)


@pytest.mark.slow
@pytest.mark.skipif(eflomal_program() is None, reason="eflomal is not installed here")
def test_the_real_eflomal_aligns_the_gold_pairs_well(fra_eng, tmp_path, monkeypatch):
    """Where eflomal is installed: its links of the studio gold pairs, appended to 5,000
    fra-eng training pairs."""
    from core.alignment.aer import score
    from core.alignment.gold import studio_gold
    from core.corpus.config import DataConfig
    from core.corpus.splits import load_splits

    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    train = load_splits(DataConfig(source=str(fra_eng))).train.pairs[:5000]
    pairs, gold = studio_gold()
    links = ef.eflomal_links([*train, *pairs])[-len(pairs) :]
    assert score(links, gold).aer < 0.25


def test_a_word_that_is_eflomals_separator_is_data(fake_eflomal):
    pairs = [(("a", "|||", "b"), ("x", "y", "z")), (("c",), ("w",))]
    links = ef.eflomal_links(pairs)
    assert links == expected(pairs)  # three words each side, not a broken line
