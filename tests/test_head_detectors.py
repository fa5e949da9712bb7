"""Head detector scores (previous-token, duplicate-token, induction) and the in-context-learning
score (``core.attention.head_detectors``): equal to a by-hand reading of each model's own
attention and logits; a perfect head scores 1; TransformerLens's own number is ours times the
rows the pattern reaches over every row; the command and the page show the same figures."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch

from core.attention import head_detectors as hd
from core.figures.head_detectors import head_scores_figure
from tests.helpers import assert_clean, plain, run_page_script

N_TOKENS, SEQS = 6, 3  # small sizes for the by-hand reading


def by_hand(weights: np.ndarray, n: int) -> dict[str, float]:
    """One head's three scores over one sequence's (N, N) weights, by loops."""
    N = 2 * n + 1
    prev = sum(weights[q, q - 1] for q in range(1, N)) / (N - 1)
    dup = sum(weights[n + i, i] for i in range(1, n + 1)) / n
    ind = sum(weights[n + i, i + 1] for i in range(1, n + 1)) / n
    return {"previous_token": prev, "duplicate_token": dup, "induction": ind}


def icl_by_hand(logits: torch.Tensor, ids: list[int]) -> np.ndarray:
    """(N - 1,) loss of token 1 .. N - 1 of ``ids`` from (N, V) logits of the same N tokens."""
    logp = logits.float().log_softmax(-1)
    return np.array([-float(logp[t - 1, ids[t]]) for t in range(1, len(ids))])


def assert_matches(s: hd.HeadScores, per_sequence: list[np.ndarray], losses: list[np.ndarray]):
    """``s`` equals the by-hand scores of each sequence's (L, H, N, N) weights, averaged."""
    L, H = s.induction.shape
    for layer in range(L):
        for head in range(H):
            hand = [by_hand(w[layer, head], s.length) for w in per_sequence]
            for name in hd.SCORES:
                want = np.mean([h[name] for h in hand])
                assert float(getattr(s, name)[layer, head]) == pytest.approx(want, abs=1e-5)
    mean = np.mean(losses, axis=0)
    early, late = s.early_late
    assert s.icl == pytest.approx(mean[late - 1] - mean[early - 1], abs=1e-4)
    assert s.repeat_loss == pytest.approx(mean[s.length :].mean(), abs=1e-4)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_language_models_scores_are_its_own_attention(lm_models, lm_loaded, family):
    """The prompt (the example sentence in the template), then the start token and the
    sequence twice, read by transformers itself with ``output_attentions``."""
    from transformers import AutoModelForCausalLM

    m = lm_loaded[family]
    s = hd.head_scores(m, N_TOKENS, SEQS, seed=3)
    ref = AutoModelForCausalLM.from_pretrained(lm_models[family], attn_implementation="eager")
    src = m.source(m.example_sentence).ids
    weights, losses = [], []
    for row in hd.random_tokens(m, N_TOKENS, SEQS, 3):
        tgt_in = m.decoder_inputs([*row, *row, m.eos_id])
        ids = m.layout.sequence(src, tgt_in)  # the adapter's own layout: a test may read it
        with torch.no_grad():
            out = ref(input_ids=torch.tensor([ids]), output_attentions=True)
        T = len(tgt_in)
        weights.append(torch.stack(out.attentions)[:, 0, :, -T:, -T:].numpy())  # (L, H, T, T)
        losses.append(icl_by_hand(out.logits[0, -T:], tgt_in))
    assert_matches(s, weights, losses)


def test_the_studio_models_scores_are_its_own_attention(tiny_model):
    """Its decoder's self-attention over the sequence, as its forward returns it."""
    m = tiny_model
    s = hd.head_scores(m, N_TOKENS, SEQS, seed=1)
    src = torch.tensor([m.source(m.example_sentence).ids])
    weights, losses = [], []
    for row in hd.random_tokens(m, N_TOKENS, SEQS, 1):
        tgt_in = m.decoder_inputs([*row, *row, m.eos_id])
        with m.evaluating(), torch.no_grad():
            logits, maps = m.model(src, torch.tensor([tgt_in]), need_weights=True)
        weights.append(maps.decoder_self[:, 0].numpy())  # (L, H, T, T)
        losses.append(icl_by_hand(logits[0], tgt_in))
    assert_matches(s, weights, losses)
    assert s.induction.shape == (m.cfg.num_decoder_layers, m.cfg.num_heads)


def test_a_perfect_head_scores_one_and_tl_is_ours_times_the_rows_reached():
    """Constructed weights: a previous-token head, a duplicate head, an induction head and a
    uniform one; TransformerLens's "mul" score, computed as it does from its own patterns
    (tokens compared with themselves), is ours times rows reached / N."""
    n = 5
    N = 2 * n + 1
    tokens = torch.tensor([99, *range(n), *range(n)])  # a start token, then n tokens twice
    prev = torch.eye(N).roll(-1, dims=1).tril()
    prev[0, 0] = 1  # the first row can only read itself
    dup, ind = torch.eye(N), torch.eye(N)
    for i in range(1, n + 1):
        dup[n + i] = torch.nn.functional.one_hot(torch.tensor(i), N)
        ind[n + i] = torch.nn.functional.one_hot(torch.tensor(i + 1), N)
    uniform = torch.ones(N, N).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    w = torch.stack([prev, dup, ind, uniform])[None, None]  # (1, 1, 4, N, N)
    s = {k: v[0] for k, v in hd.scores_of(w, n).items()}  # (4,) each
    assert s["previous_token"][0] == 1 and s["duplicate_token"][1] == 1
    assert s["induction"][2] == 1
    assert s["previous_token"][1] < 1 and s["induction"][0] == 0
    eq = (tokens[:, None] == tokens[None, :]).float().fill_diagonal_(0).tril()  # TL's duplicate
    tl = {
        "previous_token": torch.diag(torch.ones(N - 1), -1),
        "duplicate_token": eq,
        "induction": torch.cat([torch.zeros(N, 1), eq.roll(1, dims=1)[:, 1:]], 1).tril(),
    }
    for name, pattern in hd.detection_patterns(n).items():
        assert torch.equal(pattern, tl[name]), name
        rows = int(pattern.sum(-1).gt(0).sum())
        for h in range(4):
            tl_score = (w[0, 0, h] * tl[name]).sum() / w[0, 0, h].sum()  # TL's "mul"
            assert float(s[name][h]) * rows / N == pytest.approx(float(tl_score), abs=1e-6)


def test_icl_positions_scale_olssons_tokens():
    assert hd.icl_positions(512) == (50, 500)
    assert hd.icl_positions(41) == (4, 40)
    assert hd.icl_positions(5) == (1, 4)


def test_a_masked_model_and_passes_too_big_are_refused_in_one_line(
    lm_loaded, tiny_model, monkeypatch
):
    """Before any pass: a masked model (its capability row), more positions than the model
    has, more bytes than one pass may hold."""
    with pytest.raises(hd.HeadScoresError, match="masked language model"):
        hd.head_scores(lm_loaded["bert"])
    with pytest.raises(hd.HeadScoresError, match="positions"):
        hd.head_scores(tiny_model, length=tiny_model.cfg.max_positions)
    monkeypatch.setattr(hd, "PASS_BYTES", 2**20)
    monkeypatch.setattr(type(tiny_model), "patterns", None)  # no pass may start
    with pytest.raises(hd.HeadScoresError, match="limit 1 MB"):
        hd.head_scores(tiny_model, length=20, sequences=64)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_longest_sequences_a_prompted_model_holds_run_and_one_more_is_refused(
    lm_loaded, family
):
    """Audit: the check counted the source but not the prompt's template, so lengths within
    the template's few positions of the model's end passed it and failed in the model's
    position table (IndexError) instead of the one-line refusal."""
    m = lm_loaded[family]
    around = len(m.sequence_ids(m.source(m.example_sentence).ids, [m.eos_id]))
    longest = (m.cfg.max_positions - around) // 2  # the start token, n, n, the end token
    scores = hd.head_scores(m, length=longest, sequences=1)
    assert np.isfinite(scores.induction).all()
    with pytest.raises(hd.HeadScoresError, match="positions"):
        hd.head_scores(m, length=longest + 1, sequences=1)


def test_the_command_prints_what_the_figure_draws(tiny_checkpoint, capsys):
    """One line per head, then the summary; the page's figure holds the same numbers."""
    from core.head_scores import main
    from core.model.opened import open_model

    assert main(["--checkpoint", str(tiny_checkpoint), "--length", "5", "--sequences", "2"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    s = hd.head_scores(open_model(str(tiny_checkpoint)), 5, 2)
    assert lines[:-1] == s.rows() and lines[-1] == s.summary()
    fig = head_scores_figure(s)
    for trace, name in zip(fig.data, hd.SCORES):
        drawn = {(row["layer"], row["head"]): row[name] for row in lines[:-1]}
        for (layer, head), value in drawn.items():
            assert trace.z[layer][head] == pytest.approx(value, abs=1e-6)
    assert f"{s.icl:+.3f}" in fig.layout.title.subtitle.text


def test_the_page_section_shows_the_scores(studio_dirs):
    """The Attention page's "Head scores": three grids and the score the command prints."""
    from core.model.opened import open_model

    at = run_page_script(
        "attention.py", {"model": "checkpoints/fra-eng-small.pt", "section": "head_scores"}
    )
    assert_clean(at)
    s = hd.head_scores(open_model(str(studio_dirs["checkpoints"] / "fra-eng-small.pt")))
    (fig,) = at.get("plotly_chart")
    data = json.loads(fig.proto.spec)["data"]
    for trace, name in zip(data, hd.SCORES, strict=True):
        z = trace["z"]  # plotly's typed array: base64 bytes, dtype, shape
        grid = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"])
        want = getattr(s, name).numpy()
        np.testing.assert_allclose(grid.reshape(want.shape), want, atol=1e-6)
    words = plain("\n".join(m.value for m in at.markdown))
    assert f"In-context learning score:** {s.icl:+.3f}" in words
