"""Faithfulness of a masked language model (BERT, RoBERTa, DistilBERT, ELECTRA): the masking
protocol hides the word its rule names (``core.model.own_outputs``), the model's own fill is the
output, log p of the fill at the mask of occluded copies equals the model's own logits from
ids, and the methods are ranked end to end on a local corpus, by the library, the command and
the page alike."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution import faithfulness as fa
from core.corpus.splits import Split
from core.measure.sample import sample_of
from core.model import own_outputs
from tests import helpers
from tests.helpers import assert_clean, plain, run_page_script
from tests.lm_tiny import ENCODER_FAMILIES

WORDPIECE = ("bert", "distilbert", "electra")  # the tiny WordPiece tokenizer's families
SENTENCE = ["the", "boy", "is", "tall", "and", "cold", "."]  # "and": two or three pieces here
# The rule by hand: the words of one piece holding a letter are the, boy, is, tall, cold (and:
# two or three pieces; ".": punctuation); sentence number i hides number i mod 5. The tiny
# byte-level tokenizer (RoBERTa's scheme) cuts every word but "is" into pieces: "is" every time.
HIDDEN = {0: "the", 1: "boy", 2: "is", 4: "cold", 5: "the", 8: "tall"}


@pytest.fixture(params=ENCODER_FAMILIES)
def mlm(request, lm_loaded):
    return lm_loaded[request.param]


def own_logp(m, ids) -> torch.Tensor:
    """(S, V) log-probabilities of the model's own forward from ids, one sentence alone."""
    with torch.no_grad():
        return m.model(input_ids=torch.tensor([list(ids)])).logits[0].float().log_softmax(-1)


def test_the_protocol_hides_the_word_its_rule_names(mlm):
    ids = mlm.words_to_source(SENTENCE)
    tokens = mlm.source_tokens(ids)
    for index, word in HIDDEN.items():
        masked = own_outputs.masked_sentence(mlm, ids, index)
        at = masked.index(mlm.mask_id)
        expected = word if mlm.model_type in WORDPIECE else "is"
        assert tokens[at] == expected, (index, tokens)
        assert [x for i, x in enumerate(masked) if i != at] == [*ids[:at], *ids[at + 1 :]]
    assert own_outputs.masked_sentence(mlm, mlm.words_to_source([".", ".", "."]), 0) is None
    lone = mlm.words_to_source(["tired", "."])  # a word of one piece, or (byte-level) of three
    assert (own_outputs.masked_sentence(mlm, lone, 3) is None) == (mlm.model_type == "roberta")


def test_the_mask_is_no_word_and_a_words_pieces_are_one_word(lm_loaded):
    bert, roberta = lm_loaded["bert"], lm_loaded["roberta"]
    masked = own_outputs.masked_sentence(bert, bert.words_to_source(SENTENCE), 1)
    spans = fa.source_spans(bert, masked)  # [CLS] the [MASK] is tall a ##n ##d cold . [SEP]
    n = len(bert.tokenizer.tokenize("and"))  # 3, or 2 (a ##nd): the tiny trainer breaks ties
    assert n > 1  # either way, as it likes; the other words are one piece each
    assert spans == [(1, 2), (3, 4), (4, 5), (5, 5 + n), (5 + n, 6 + n), (6 + n, 7 + n)]
    masked = own_outputs.masked_sentence(roberta, roberta.words_to_source(SENTENCE), 0)
    tokens = roberta.source_tokens(masked)
    words = ["".join(tokens[a:b]).replace("##", "") for a, b in fa.source_spans(roberta, masked)]
    assert words == ["The", "␣boy", "tall", "and", "␣cold."]  # Ġ starts a word, <mask> is none


def test_the_fill_is_the_models_own_argmax_and_skipped_sentences_are_counted(mlm):
    sources = [mlm.words_to_source(w) for w in (SENTENCE, [".", ".", "."], ["i", "am", "home"])]
    cases = own_outputs.own_outputs(mlm, sources)
    assert cases[1] is None  # nothing to hide
    for index in (0, 2):
        masked, fill = cases[index]
        assert masked == own_outputs.masked_sentence(mlm, sources[index], index)
        at = masked.index(mlm.mask_id)
        assert fill == [int(own_logp(mlm, masked)[at].argmax())]
    pairs = [(s, ["x"]) for s in (SENTENCE, [".", "."], ["i", "am", "home", "."])]
    sample = sample_of(mlm, Split(pairs), 3)
    assert len(fa.translate_sample(mlm, sample)) == 2


def test_the_fills_passes_each_tick_the_heavy_slots_clock(lm_loaded, monkeypatch):
    """Every padded pass of the fills reports its rows (faithfulness' tick checks the heavy
    slot's deadline there, as the translators' greedy passes do)."""
    monkeypatch.setattr(own_outputs, "FILL_ROWS", 2)
    m = lm_loaded["bert"]
    sources = [m.words_to_source(SENTENCE)] * 5
    ticks: list[int] = []
    own_outputs.own_outputs(m, sources, tick=ticks.append)
    assert ticks == [2, 2, 1]


def test_log_p_of_the_fill_in_occluded_copies_equals_the_models_own_logits(mlm, monkeypatch):
    monkeypatch.setattr(fa, "ROWS_PER_PASS", 2)  # several batches of copies
    masked, fill = own_outputs.own_outputs(mlm, [mlm.words_to_source(SENTENCE)])[0]
    spans = fa.source_spans(mlm, masked)
    at = masked.index(mlm.mask_id)
    assert all(not a <= at < b for a, b in spans)  # the mask is the output's position
    chosen = ([], [0], [len(spans) - 1], [0, 1], list(range(len(spans))))
    sources = [fa.occluded(masked, spans, c, mlm.unk_id) for c in chosen]
    assert all(s[at] == mlm.mask_id for s in sources)  # never occluded
    batched = fa.output_logp(mlm, sources, fill)  # (5, 1)
    assert batched.shape == (5, 1)
    for row, src in zip(batched, sources):
        assert torch.allclose(row[0], own_logp(mlm, src)[at, fill[0]], atol=1e-5)
    assert (batched[0] - batched[-1]).abs().max() > 1e-6  # occluding every word changes it


def local_corpus(path) -> str:
    """A TSV of made-up pairs of the tiny models' words: 300 English sentences, 6 of them held
    out for validation (2 %)."""
    subjects = ["i am", "you are", "he is", "she is", "we are", "they are"]
    adjectives = ["cold", "hot", "tired", "tall", "small"]
    lines = [
        f"{s} {a} {b} {'home ' * h}.\tje suis {a} {b} .\tmade up"
        for s in subjects
        for a in adjectives
        for b in adjectives
        for h in (0, 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_faithfulness_ranks_every_default_method_on_a_local_corpus(
    family, lm_loaded, lm_models, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    m, data = lm_loaded[family], local_corpus(tmp_path / "pairs.tsv")
    assert m.supports("faithfulness") is None
    result = fa.faithfulness_for(m, lm_models[family], 4, source=data)
    assert {r["method"] for r in result.methods} == {*fa.DEFAULT_METHODS, fa.RANDOM}
    assert result.sentences + result.skipped == 4 and result.tokens == result.sentences > 0
    for row in result.methods:
        assert row["sentences"] > 0 and np.isfinite(row["spearman"]), row
        assert all(np.isfinite(d) for d in row["deletion"]), row
    assert result.row("attention")["name"] == "Raw attention (last layer, mean of heads)"
    argv = ["--checkpoint", str(lm_models[family]), "--faithfulness", "--sentences", "4"]
    assert attribute_cmd.main([*argv, "--data", data, "--refresh"]) == 0  # measured again
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in result.methods]
    assert [{k: v for k, v in r.items() if k not in ("seconds", "sample")} for r in lines] == strip
    counts = {"sentences": result.sentences, "tokens": result.tokens, "skipped": result.skipped}
    for r in lines:  # the figures the page states above its table
        assert {k: r["sample"][k] for k in counts} == counts and r["sample"]["cached"] is False


def test_the_page_ranks_the_methods_for_a_masked_model(
    studio_dirs, lm_models, tmp_path, monkeypatch
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    shutil.copytree(lm_models["bert"], studio_dirs["checkpoints"] / "bert")
    query = {
        "model": "checkpoints/bert/",
        "sentence": "the boy is [MASK] .",
        "section": "attribution",
    }
    at = run_page_script("attention.py", query)
    said = plain("\n".join(c.value for c in at.caption))
    assert "hidden by the mask token" in said and "writes no translation" not in said
    at.button(key="atr_measure").click().run()
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    table = at.dataframe[-1].value
    assert len(table) == len(fa.DEFAULT_METHODS) + 1
    assert "Random ranking (baseline)" in list(table["method"])
    assert np.isfinite(table["drop k=1"].astype(float)).all()
    shown = plain(" ".join(m.value for m in at.markdown))
    assert "Methods ranked by agreement with occlusion" in shown
