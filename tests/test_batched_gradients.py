"""The whole-file mode's batches (issue 67, item 2): sentences padded together through the
gradient methods give each sentence's figures alone (within 1e-5, on every family of the
conformance suite and the studio's model), in fewer passes, the file's order, errors per line
and resuming kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.attribution import batched_gradients, step_scores
from core.attribution.batched_gradients import attributions, batchable, fits
from core.attribution.file_mode import attribute_file
from core.attribution.gradients import GradientChoices
from core.attribution.methods import attribute, method_problem
from core.model.interface import prompt_positions
from core.model.parts import DecodeSettings
from core.runs import budget
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import LM_FAMILIES

HF_PAIRS = (  # sources and targets of different lengths: padding on both sides
    ("i am cold .", "je suis froid ."),
    ("the boy is tall and the girl is small", "le garçon est grand"),
    ("we", "nous sommes fatigué il est chaud elle"),
)
STUDIO_PAIRS = (
    ("i'm home .", "je suis chez moi ."),
    ("i'm cold . i'm home .", "j'ai froid ."),
    ("i'm cold .", "je suis chez moi . j'ai froid ."),
)
IG = GradientChoices(steps=6)
INSEQ_LIKE = GradientChoices("unk", True, 6, "riemann_trapezoid", "l2", "prob", "none")


def model_of(family, tiny_model, hf_loaded, lm_loaded):
    """The studio's tiny model or a conformance family's, with its pairs."""
    if family == "studio":
        return tiny_model, STUDIO_PAIRS
    return (lm_loaded if family in LM_FAMILIES else hf_loaded)[family], HF_PAIRS


def assert_alone(m, pairs, method, choices):
    """The batched attributions of ``pairs`` equal each pair's alone within 1e-5 plus 1e-4
    of the value (float32's rounding: a raw score of 15 moves by 1e-5 with the batch's
    shape), as far as the model explains them at all (a refusal, ``method_problem``, keeps
    the file mode one at a time). Rows normalised from raw scores summing to less than 1e-3
    are left out of the normalised comparison: there a rounding of 1e-8 is a percent (tiny
    random BLOOM's gradients are 1e-6; its raw scores agree to 7e-8)."""
    if problem := method_problem(m, method):
        pytest.skip(problem)
    ts = [m.force(s, t, DecodeSettings()) for s, t in pairs]
    ids = [(list(t.src_ids), list(t.out_ids)) for t in ts]
    assert len({len(s) for s, _ in ids}) > 1 and len({len(o) for _, o in ids}) > 1  # padded
    for (src, out), got in zip(ids, attributions(m, ids, method, choices)):
        alone = attribute(m, src, out, method, choices=choices)
        np.testing.assert_allclose(got.raw, alone.raw, atol=1e-5, rtol=1e-4)
        rows = np.abs(alone.raw).sum(-1) >= 1e-3  # (T,) rows of a scale to normalise
        np.testing.assert_allclose(
            got.contributions[rows], alone.contributions[rows], atol=1e-5, rtol=1e-4
        )
        if alone.completeness is not None:  # a ratio of float noise where f barely changes
            assert got.completeness == pytest.approx(alone.completeness, abs=1e-4)
        assert got.extra == alone.extra and got.source_length == alone.source_length


@pytest.mark.parametrize("family", ["studio", *CONFORMANCE, *LM_FAMILIES])
@pytest.mark.parametrize("method", ["grad-input", "integrated-gradients"])
def test_batched_figures_are_each_sentences_alone(family, method, tiny_model, hf_loaded, lm_loaded):
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    assert_alone(m, pairs, method, IG)


@pytest.mark.parametrize("family", ["studio", "marian", "bart", "m2m_100"])
def test_inseqs_choices_batched_are_each_sentences_alone(family, tiny_model, hf_loaded, lm_loaded):
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    assert_alone(m, pairs, "integrated-gradients", INSEQ_LIKE)
    assert_alone(m, pairs, "grad-input", GradientChoices(function="entropy", aggregation="l2"))


def test_what_batches_and_what_goes_alone():
    assert batchable("grad-input", GradientChoices()) and batchable("integrated-gradients", IG)
    assert not batchable("integrated-gradients", GradientChoices(baseline="expected"))
    assert not batchable("alti", GradientChoices())
    assert not batchable("grad-input", GradientChoices(function="kl"))


def test_a_batch_is_sized_by_the_byte_budget(tiny_model):
    pairs = [(3, 3)] * 4  # (source, output) lengths
    row = 2 * budget.patch_row_bytes(vars(tiny_model.cfg), 3, 3)
    assert fits(tiny_model, pairs, "grad-input", IG, most=4 * row)
    assert not fits(tiny_model, pairs, "grad-input", IG, most=3 * row)
    assert not fits(tiny_model, pairs, "integrated-gradients", IG, most=4 * row)  # 6 points
    assert fits(tiny_model, pairs, "integrated-gradients", IG, most=24 * row)


def test_a_pass_takes_sentences_of_similar_lengths_within_its_rows_and_bytes(tiny_model):
    pairs = [([0] * s, [0] * t) for s, t in [(5, 9), (3, 2), (8, 8), (4, 3), (30, 28)]]
    assert batched_gradients.passes(tiny_model, pairs, 1) == [[1, 3, 2, 0, 4]]  # by length
    assert batched_gradients.passes(tiny_model, pairs, 128) == [[1, 3], [2, 0], [4]]  # rows
    D, held = tiny_model.cfg.d_model, 4 * 2 * 28 * (30 + 28)  # float32, two sentences
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batched_gradients, "TOTAL_BYTES", held * D - 1)
        assert batched_gradients.passes(tiny_model, pairs, 1)[-1] == [4]  # bytes


def test_a_pass_keeps_one_layers_attention_weights_within_their_bytes(tiny_model, lm_loaded):
    pairs = [([0] * 6, [0] * 6)] * 4
    H = tiny_model.cfg.num_heads
    two = 4 * 2 * 3 * H * 6 * 6  # float32: two sentences' 3 points, N = 6
    assert batched_gradients.attention_bytes(tiny_model, 6, 6, 6) == two
    lm = lm_loaded["gpt2"]  # one stack reads its template, the source and the output
    N = prompt_positions(lm) + 6 + 6
    assert batched_gradients.attention_bytes(lm, 6, 6, 6) == 4 * 6 * lm.cfg.num_heads * N * N
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batched_gradients, "ATTENTION_BYTES", two)
        assert batched_gradients.passes(tiny_model, pairs, 3) == [[0, 1], [2, 3]]
        mp.setattr(batched_gradients, "ATTENTION_BYTES", 1)  # one sentence a pass, at least
        assert batched_gradients.passes(tiny_model, pairs, 3) == [[0], [1], [2], [3]]


@pytest.mark.parametrize("family", ["studio", *CONFORMANCE, *LM_FAMILIES])
def test_passes_cut_to_the_attention_bytes_give_one_passs_figures(
    family, tiny_model, hf_loaded, lm_loaded, monkeypatch
):
    """Sentences in passes of their own (the cut ATTENTION_BYTES makes on long sentences)
    give the figures of one pass of all, within 1e-5 plus 1e-4 of the value (gradient ×
    input where integrated gradients is refused)."""
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    method = "grad-input" if method_problem(m, "integrated-gradients") else "integrated-gradients"
    ts = [m.force(s, t, DecodeSettings()) for s, t in pairs]
    ids = [(list(t.src_ids), list(t.out_ids)) for t in ts]
    K = len(batched_gradients.points(method, IG)[0])
    monkeypatch.setattr(batched_gradients, "ATTENTION_BYTES", 2**62)
    assert len(batched_gradients.passes(m, ids, K)) == 1
    whole = attributions(m, ids, method, IG)
    monkeypatch.setattr(batched_gradients, "ATTENTION_BYTES", 1)
    assert len(batched_gradients.passes(m, ids, K)) == len(ids)
    for got, want in zip(attributions(m, ids, method, IG), whole):
        np.testing.assert_allclose(got.raw, want.raw, atol=1e-5, rtol=1e-4)
        if want.completeness is not None:
            assert got.completeness == pytest.approx(want.completeness, abs=1e-4)


FILE = (
    "i'm home .\tje suis chez moi .\n"
    "i'm cold .\n"  # the model's own translation
    "i'm home .\tje suis chez moi .\tje suis chez elle .\n"  # a contrast: explained alone
    + "i'm " * 600  # a text too long: an error of its own
    + "\ni'm cold .\tj'ai froid .\n"
)


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(FILE, encoding="utf-8")
    return path


def records_of(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def without_seconds(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "seconds"}


def assert_same_step_scores(got: dict, want: dict) -> None:
    """Two records' step scores: the same tokens and ranks, numbers within float32's
    rounding (written to 6 places: a padded pass may move the last one)."""
    assert got.keys() == want.keys()
    for name, values in got.items():
        if name in ("tokens", "rank", "contrast_tokens", "contrast_source"):
            assert values == want[name]
        else:
            np.testing.assert_allclose(values, want[name], atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("method", ["grad-input", "integrated-gradients"])
def test_the_file_mode_batches_in_fewer_passes_with_the_same_records(
    tiny_model, pairs_file, tmp_path, method, monkeypatch
):
    passes = []
    real = type(tiny_model).log_probs_at
    monkeypatch.setattr(type(tiny_model), "log_probs_at", lambda *a: passes.append(1) or real(*a))
    choices = GradientChoices(steps=4)
    alone, batched = tmp_path / "alone.jsonl", tmp_path / "batched.jsonl"
    attribute_file(tiny_model, pairs_file, alone, method, choices=choices, batch_bytes=0)
    one_at_a_time, passes[:] = len(passes), []
    summary = attribute_file(tiny_model, pairs_file, batched, method, choices=choices)
    assert len(passes) < one_at_a_time  # three lines share their passes
    assert summary["written"] == 5
    got, want = records_of(batched), records_of(alone)
    assert [r["line"] for r in got] == [0, 1, 2, 3, 4]  # the file's order
    assert "error" in got[3] and got[3] == want[3]
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in ("contributions", "raw", "source_share"):
            if key in a:
                np.testing.assert_allclose(a[key], b[key], atol=1e-5, rtol=1e-4)
        if "step_scores" in a:  # one padded pass: float32's rounding in the 6th place
            assert_same_step_scores(a["step_scores"], b["step_scores"])
        rest = ("contributions", "raw", "source_share", "seconds", "completeness_error")
        rest += ("step_scores",)
        assert {k: v for k, v in a.items() if k not in rest} == {
            k: v for k, v in b.items() if k not in rest
        }


PLAIN = "i'm home .\tje suis chez moi .\ni'm cold .\ni'm cold . i'm home .\tj'ai froid .\n"


def test_a_batchs_step_scores_are_one_padded_pass(tiny_model, tmp_path, monkeypatch):
    """The step scores of a batch's lines come from one padded teacher-forced pass, not one
    pass per line (issue 67, item 2: the file mode's speed), with each line's figures."""
    path = tmp_path / "plain.tsv"
    path.write_text(PLAIN, encoding="utf-8")
    rows = []
    real = type(tiny_model).run
    monkeypatch.setattr(
        type(tiny_model),
        "run",
        lambda s, src, *a, **k: rows.append(len(src)) or real(s, src, *a, **k),
    )
    alone, batched = tmp_path / "alone.jsonl", tmp_path / "batched.jsonl"
    attribute_file(tiny_model, path, alone, "grad-input", batch_bytes=0)
    rows.clear()
    attribute_file(tiny_model, path, batched, "grad-input")
    assert rows == [3, 3]  # the batch's embeddings, then its step scores: no pass per line
    for a, b in zip(records_of(batched), records_of(alone), strict=True):
        assert_same_step_scores(a["step_scores"], b["step_scores"])


@pytest.mark.parametrize("family", ["studio", *CONFORMANCE, *LM_FAMILIES])
def test_step_scores_of_padded_pairs_are_each_pairs_alone(family, tiny_model, hf_loaded, lm_loaded):
    """``step_scores.batched_logits``: every family's padded pass gives each pair's logits."""
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    ts = [m.force(s, t, DecodeSettings()) for s, t in pairs]
    ids = [(list(t.src_ids), list(t.out_ids)) for t in ts]
    for t, got in zip(ts, step_scores.batched_logits(m, ids)):
        alone = step_scores.step_scores(m, t)
        given = step_scores.step_scores(m, t, logits=got)
        assert given.rank == alone.rank and given.tokens == alone.tokens
        for name in ("probability", "entropy", "perplexity", "logit", "crossentropy"):
            np.testing.assert_allclose(
                getattr(given, name), getattr(alone, name), atol=1e-5, rtol=1e-5
            )


def test_padded_logits_hold_one_pass_within_their_bytes(tiny_model, monkeypatch):
    """``batched_logits`` cuts the pairs into passes of at most LOGIT_BYTES of logits."""
    ts = [tiny_model.force(s, t, DecodeSettings()) for s, t in STUDIO_PAIRS]
    ids = [(list(t.src_ids), list(t.out_ids)) for t in ts]
    whole = list(step_scores.batched_logits(tiny_model, ids))
    V = tiny_model.vocab_sizes()[1]
    monkeypatch.setattr(step_scores, "LOGIT_BYTES", 4 * V * max(len(o) for _, o in ids))
    rows = []
    real = type(tiny_model).run
    monkeypatch.setattr(
        type(tiny_model), "run", lambda s, src, *a: rows.append(len(src)) or real(s, src, *a)
    )
    for a, b in zip(step_scores.batched_logits(tiny_model, ids), whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert rows == [1, 1, 1]


def test_a_batched_file_resumes_where_it_stopped(tiny_model, pairs_file, tmp_path):
    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs_file, out, "grad-input")
    whole = records_of(out)
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])  # killed while writing line 3
    again = attribute_file(tiny_model, pairs_file, out, "grad-input")
    assert (again["skipped"], again["written"]) == (2, 3)
    resumed = records_of(out)
    assert [r["line"] for r in resumed] == [0, 1, 2, 3, 4]
    assert [without_seconds(r) for r in resumed] == [without_seconds(r) for r in whole]


def test_a_batch_that_cannot_run_explains_each_line_alone(tiny_model, pairs_file, tmp_path):
    """A baseline token the tokenizer lacks fails the batch: every line then says so alone."""
    out = tmp_path / "out.jsonl"
    no_mask = GradientChoices(baseline="mask", steps=4)
    attribute_file(tiny_model, pairs_file, out, "integrated-gradients", choices=no_mask)
    records = records_of(out)
    assert [r["line"] for r in records] == [0, 1, 2, 3, 4]
    assert all("error" in r for r in records)


def test_each_batch_is_one_pass_within_the_budget(tiny_model, pairs_file, tmp_path, monkeypatch):
    sizes = []
    real = batched_gradients.attributions

    def counted(m, pairs, method, choices):
        sizes.append(len(pairs))
        return real(m, pairs, method, choices)

    monkeypatch.setattr("core.attribution.file_mode.attributions", counted)
    row = 2 * budget.patch_row_bytes(vars(tiny_model.cfg), 8, 8)
    attribute_file(tiny_model, pairs_file, tmp_path / "a.jsonl", "grad-input")
    assert sizes == [2, 1]  # lines 0-1, then (a contrast, an error) line 4
    sizes.clear()
    attribute_file(tiny_model, pairs_file, tmp_path / "b.jsonl", "grad-input", batch_bytes=row)
    assert sizes == [1, 1, 1]


def graph(t: torch.Tensor) -> set:
    """The autograd nodes a backward pass from ``t`` runs."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [child for child, _ in node.next_functions]
    return seen


def graph_nodes(t: torch.Tensor) -> int:
    """The operations autograd's backward pass from ``t`` runs (its graph's nodes)."""
    return len(graph(t))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_one_stack_models_backward_pass_does_not_grow_with_its_rows(family, lm_loaded):
    """Integrated gradients' rows (integration points, sentences) go through a decoder-only
    model's embedding sites in one gather each way, not a copy per row: the backward pass of
    64 rows runs as many operations as that of 2 (issue 67, item 2: its speed)."""
    m = lm_loaded[family]
    src = torch.tensor([m.source(HF_PAIRS[1][0]).ids])  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(m.target_ids(HF_PAIRS[1][1]))])  # (1, T)
    own = m.embeddings(src, tgt_in)  # (1, S, D), (1, T, D)

    def nodes(rows: int) -> int:
        x = [e.expand(rows, -1, -1).clone().requires_grad_() for e in own]  # (rows, ., D)
        return graph_nodes(torch.stack(m.log_probs_at(src, tgt_in, *x, torch.tensor([0, 1]))))

    assert nodes(64) == nodes(2)


@pytest.mark.parametrize("family", ["studio", "marian", "t5", "gpt2", "llama"])
def test_each_steps_gradient_runs_back_through_its_own_projection_only(
    family, tiny_model, hf_loaded, lm_loaded
):
    """The gradient methods' f of one step is its own graph above the stacks: a backward pass
    from step 0 never runs another step's projection onto the vocabulary (P of them, P times
    over P steps, were a quarter of integrated gradients' time at opus-mt's sizes; issue 67),
    and the steps' log-probabilities are those of the ids path."""
    m, pairs = model_of(family, tiny_model, hf_loaded, lm_loaded)
    src = torch.tensor([m.source(pairs[0][0]).ids])  # (1, S)
    out = m.target_ids(pairs[0][1])
    tgt_in = torch.tensor([m.decoder_inputs(out)])  # (1, T)
    x = [e.expand(2, -1, -1).clone().requires_grad_() for e in m.embeddings(src, tgt_in)]
    steps = torch.arange(min(3, tgt_in.size(1)))
    with m.evaluating():
        logps = m.log_probs_at(src, tgt_in, *x, steps)  # P x (2, V)
        want = m.run(src, tgt_in).float().log_softmax(-1)[0, steps]  # (P, V)
    assert len(logps) == len(steps)
    for logp, row in zip(logps, want):
        torch.testing.assert_close(logp.detach(), row.expand(2, -1), atol=1e-5, rtol=1e-5)
    if len(logps) > 1:
        first, others = graph(logps[0]), [graph(x) - graph(logps[0]) for x in logps[1:]]
        assert all(x.grad_fn not in first for x in logps[1:])
        assert all(others)  # each later step has nodes of its own
