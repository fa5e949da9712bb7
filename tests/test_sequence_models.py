"""What the Attention page reads a model that reads no sentence on, and what "Over training"
shows of a run without BLEU, below the page (the pages: tests/test_app_sequence_models.py):
the shipped induction model's default sequence is the one its training scored its heads on,
its history's probes are token sequences, and each snapshot carries the best head's
induction score of its own evaluation record."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.attention import snapshots
from core.attention.task_sequence import task_sequence
from core.model.capabilities import problem
from core.model.opened import open_model
from core.model.parts import TranslationError
from core.runs.circuit_history import circuit_evals
from core.runs.history import HistoryFile
from tests.helpers import ROOT

SHIPPED = ROOT / "checkpoints" / "induction-2l.hf"
HISTORY = ROOT / "checkpoints" / "induction-2l.history"


def test_only_a_model_trained_on_the_induction_task_reads_no_sentence():
    assert "induction task" in problem("language model", "llama", "sentence", "induction")
    for family in ("studio", "hugging face", "language model", "masked language model"):
        assert problem(family, "llama", "sentence", "translation") is None


def test_only_a_language_model_not_trained_here_takes_a_prompt_template():
    """``template``: a decoder trained here reads its own layout (the task's row, in
    ``with_prompt``'s words); every other family reads no prompt at all."""
    lm = open_model(str(SHIPPED))  # a decoder trained here on the induction task
    with pytest.raises(TranslationError) as refused:
        lm.with_prompt("Translate: {src}\nFrench:")
    assert lm.supports("template") == str(refused.value)
    assert problem("language model", "gpt2", "template", "") is None  # a downloaded one does
    assert "the lm task" in problem("language model", "llama", "template", "lm")  # trained here
    # on the pairs' text, packed: it reads them as it was trained (it was prompted "English:")
    for family in ("studio", "hugging face", "masked language model"):
        assert "reads no prompt" in problem(family, "marian", "template", "")


def test_the_induction_models_sequence_is_the_one_its_training_scored():
    lm = open_model(str(SHIPPED))
    (probe,) = snapshots.probe_sentences(HISTORY)
    assert task_sequence(lm) == probe
    words = probe.split()
    assert len(words) == 32 and words[:16] == words[16:]  # n 16 tokens, read twice
    translator = SimpleNamespace(meta={"data_config": {"task": "translation"}})
    assert task_sequence(translator) == ""


def test_a_snapshot_carries_its_evaluations_best_induction_score_and_no_bleu():
    (probe,) = snapshots.probe_sentences(HISTORY)
    assert snapshots.probe_noun(HISTORY) == "sequence"
    series = snapshots.snapshot_series(HISTORY, probe)
    assert series.measured("induction") and not series.measured("val_bleu")
    records = {r["step"]: r for r in circuit_evals(HistoryFile(HISTORY).read_metrics())}
    for frame in series.frames:
        grid = records[frame.step]["circuits"]["induction"]
        assert frame.induction == max(max(row) for row in grid)
    assert series.frames[-1].induction > 0.5 > series.frames[0].induction  # it formed


def test_a_translation_runs_probes_are_sentences_with_bleu():
    history = ROOT / "checkpoints" / "fra-eng-small.history"
    assert snapshots.probe_noun(history) == "sentence"
    (first, *_) = snapshots.probe_sentences(history)
    series = snapshots.snapshot_series(history, first)
    assert series.measured("val_bleu") and not series.measured("induction")
