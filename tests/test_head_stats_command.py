"""``python -m core.head_scores --head-stats``: the rows of the Maps section's "Head statistics"
table (``mark_supervised(head_table(...))``) of the translation the Attention page makes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from core.attention.head_stats import SUPERVISED_LABEL, head_table, mark_supervised
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.head_scores import main
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import atomic_save, read_checkpoint
from core.model.opened import open_model
from core.model.parts import GREEDY, DecodeSettings
from tests.helpers import ROOT, assert_clean, run_page_script

SENTENCE = "i'm home ."
ALIGN = {"align_weight": 0.05, "align_layer": 1, "align_head": 2, "align_source": "train.links"}
INDUCTION = ROOT / "checkpoints" / "induction-2l.hf"  # a model with decoder self-attention only
SEQUENCE = "3 5 7 3 5 7"


def supervise(path) -> None:
    """Mark the checkpoint at ``path`` as trained to align cross layer 1 head 2."""
    ckpt = read_checkpoint(path)
    ckpt["train_config"] = {**ckpt["train_config"], **ALIGN}
    atomic_save(ckpt, path)


@pytest.fixture(scope="module")
def aligned(tiny_checkpoint, tmp_path_factory):
    """The tiny model, its cross layer 1 head 2 marked as trained to align."""
    path = tmp_path_factory.mktemp("aligned") / "tiny-aligned.pt"
    path.write_bytes(tiny_checkpoint.read_bytes())
    supervise(path)
    return path


def command_rows(capsys, *argv) -> list[dict]:
    """The command's JSON lines (it must exit 0)."""
    assert main(list(argv)) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def page_rows(lm, kind: str, sentence: str, settings=GREEDY, target: str = ""):
    """What the Maps section's table shows for this translation, NaN as None."""
    maps = SentenceMaps.from_translation(translate_sentence(lm, sentence, settings, target))
    table = mark_supervised(head_table(maps, kind), kind, lm.meta)
    return [{k: None if pd.isna(v) else v for k, v in r.items()} for r in table.to_dict("records")]


def refused(capsys, *argv) -> str:
    """The one error line of a refused command (exit 2)."""
    assert main(list(argv)) == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1
    return errors[0]


@pytest.mark.parametrize("kind", KINDS)
def test_the_rows_are_the_tables_of_the_pages_translation(aligned, kind, capsys):
    """Each kind, decoded with a beam, its length penalty and longest output as the page's."""
    decode = ["--beam", "3", "--alpha", "1.2", "--max-len", "3"]
    asked = ["--checkpoint", str(aligned), "--head-stats", "--sentence", SENTENCE, "--kind", kind]
    rows = command_rows(capsys, *asked, *decode)
    lm = open_model(str(aligned))
    assert rows == page_rows(lm, kind, SENTENCE, DecodeSettings(3, 1.2, 3)) and len(rows) == 8
    greedy = page_rows(lm, kind, SENTENCE)  # decoded to its end: longer output maps
    assert (rows == greedy) == (kind == "encoder")
    marked = [r["label"].endswith(f" · {SUPERVISED_LABEL}") for r in rows]
    assert marked == [kind == "cross" and (r["layer"], r["head"]) == (1, 2) for r in rows]
    assert rows != page_rows(lm, kind, "i'm cold .")  # the sentence's own


def test_a_typed_translation_is_fed_to_the_decoder(aligned, capsys):
    """--target: the table of the translation the page forces, not of the model's own."""
    target = "je suis chez moi ."
    asked = ["--checkpoint", str(aligned), "--head-stats", "--sentence", SENTENCE]
    rows = command_rows(capsys, *asked, "--kind", "decoder_self", "--target", target)
    assert rows == page_rows(open_model(str(aligned)), "decoder_self", SENTENCE, target=target)


def test_an_induction_model_reads_its_tokens_and_lacks_the_other_kinds(capsys):
    """A model with decoder self-attention only: its table over the tokens read; the kinds it
    lacks are one error line, exit 2."""
    asked = ["--checkpoint", str(INDUCTION), "--head-stats", "--sentence", SEQUENCE]
    rows = command_rows(capsys, *asked, "--kind", "decoder_self")
    lm = open_model(str(INDUCTION))
    assert rows == page_rows(lm, "decoder_self", "", target=SEQUENCE)  # as the page reads it
    for kind in ("encoder", "cross"):
        line = refused(capsys, *asked, "--kind", kind)
        assert line == f"error: This model has no {kind} attention map; it has: decoder_self."
    assert "induction task" in refused(capsys, *asked, "--target", "1 2")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sentence", SENTENCE], "error: --sentence: only with --head-stats"),
        (["--kind", "encoder"], "error: --kind: only with --head-stats"),
        (["--beam", "2"], "--target-lang: only with --head-stats"),
        (["--head-stats"], "give a sentence"),
        (["--head-stats", "--sentence", "hi", "--length", "5"], "leave them out"),
        (["--head-stats", "--sentence", "hi", "--kind", "both"], "invalid choice"),
    ],
)
def test_misused_flags_are_one_line_before_any_model(argv, says, capsys):
    """Sentence flags without --head-stats, no sentence, detector flags with it, a kind that
    is none: one error line and exit 2 (no model named exists)."""
    assert says in refused(capsys, "--checkpoint", "no-such-model.pt", *argv)


def test_the_page_shows_the_rows_the_command_prints(studio_dirs, capsys):
    """The Maps section's "Head statistics" table: the command's rows, the mark included."""
    shipped = studio_dirs["checkpoints"] / "fra-eng-small.pt"
    supervise(shipped)
    query = {"model": "checkpoints/fra-eng-small.pt", "section": "maps", "kind": "cross"}
    query |= {"sentence": SENTENCE, "beam": "2", "max_len": "3"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    (shown,) = [df.value for df in at.dataframe if "label" in df.value.columns]
    asked = ["--checkpoint", str(shipped), "--head-stats", "--sentence", SENTENCE]
    rows = pd.DataFrame(command_rows(capsys, *asked, "--beam", "2", "--max-len", "3"))
    assert list(shown.columns) == list(rows.columns)
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), rows, check_dtype=False)
    assert shown["label"].str.endswith(SUPERVISED_LABEL).sum() == 1
