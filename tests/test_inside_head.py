"""Inside a head: q·k rebuilt from W_q/W_k equals the model's maps; the logit lens; figures;
``python -m core.inside_head``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core import inside_head as command
from core.attention.kinds import KINDS
from core.attention.logit_lens import LENS_COLORS, lens_log_probs, logit_lens
from core.attention.query_key import InsideHeadError, head_scores, query_key_view
from core.figures import inside_head as figs
from core.figures.labels import plotly_text
from core.figures.logit_lens import logit_lens_figure
from core.model.blocks import subsequent_mask
from core.model.checked_translation import translate_sentence
from core.model.studio_model import StudioModel
from core.model.transformer import Transformer
from tests.helpers import random_model, toy_model_config

SENTENCE = "the cat sees the dog ."  # repeated "the": unique rows and columns needed


@pytest.fixture(scope="module", params=["word", "bpe", "pre-LN"])
def case(request, tiny_model, bpe_run):
    """(StudioModel, Translation) of a word model, a BPE model and an untrained pre-LN model."""
    if request.param == "word":
        lm = tiny_model
    elif request.param == "bpe":
        lm = StudioModel.load(bpe_run / "last.pt")
    else:
        _, src_vocab, tgt_vocab = random_model()
        torch.manual_seed(1)
        size = len(src_vocab)
        cfg = toy_model_config(src_vocab_size=size, tgt_vocab_size=size, norm_first=True)
        lm = StudioModel(Transformer(cfg).eval(), src_vocab, tgt_vocab)
    sentence = SENTENCE if request.param != "pre-LN" else "i am cold ."
    return lm, translate_sentence(lm, sentence)


def model_maps(lm, p):
    """The model's own pass over the same ids with need_weights=True: (logits, AttentionMaps)."""
    with torch.no_grad():
        return lm.model(p.src, p.tgt_in, need_weights=True)


def test_the_recorded_pass_is_the_models_own_forward(case):
    lm, t = case
    p = lm.forced(t.src_ids, t.out_ids)
    logits, _ = model_maps(lm, p)
    assert torch.equal(p.logits, logits)
    assert len(p.decoder_outputs) == lm.model.cfg.num_decoder_layers


@pytest.mark.parametrize("kind", KINDS)
def test_rebuilt_weights_equal_the_models_maps_for_every_head(case, kind):
    """q from W_q, k from W_k, scaled, masked, softmaxed: the model's map within 1e-6."""
    lm, t = case
    p = lm.forced(t.src_ids, t.out_ids)
    _, maps = model_maps(lm, p)
    model_w = getattr(maps, kind)[:, 0]  # (L, H, Tq, Tk)
    for layer in range(model_w.shape[0]):
        for head in range(model_w.shape[1]):
            s = head_scores(lm, p, kind, layer, head)
            assert s.weights.dtype == torch.float32
            assert torch.allclose(s.weights, model_w[layer, head], rtol=0, atol=1e-6)
            tq, tk = s.weights.shape
            expected = (
                subsequent_mask(tq) if kind == "decoder_self" else torch.ones(tq, tk, dtype=bool)
            )
            assert torch.equal(s.mask, expected)
            assert torch.all(s.weights[~s.mask] == 0)  # masked keys get exactly nothing
            assert torch.allclose(s.weights.sum(-1), torch.ones(tq), atol=1e-6)
    other = head_scores(lm, p, kind, 0, 1).weights
    assert not torch.allclose(other, model_w[0, 0], atol=1e-6)  # the check can fail


@pytest.mark.parametrize("kind", KINDS)
def test_one_query_taken_apart_adds_up(case, kind):
    lm, t = case
    queries = t.src_tokens if kind == "encoder" else t.output_tokens
    query = len(queries) - 1
    v = query_key_view(lm, t, kind, 1, 2, query)
    assert v.q.shape == (lm.model.cfg.d_model // lm.model.cfg.num_heads,)
    assert v.keys.shape == v.products.shape == (len(v.key_tokens), v.head_width)
    assert np.allclose(v.products.sum(-1) / np.sqrt(v.head_width), v.scores, atol=1e-5)
    assert v.weights.sum() == pytest.approx(1.0, abs=1e-6)
    assert v.mask.all()  # the last query sees every key, causal or not
    first = query_key_view(lm, t, kind, 1, 2, 0)
    assert first.mask.sum() == (1 if kind == "decoder_self" else len(v.key_tokens))
    assert json.loads(json.dumps(v.to_json()))["query_token"] == queries[query]


@pytest.mark.parametrize(
    ("where", "message"),
    [((9, 0, 0), "Layer 9: this model has 2"), ((0, 7, 0), "Head 7"), ((0, 0, 99), "Query 99")],
)
def test_a_head_or_token_outside_the_model_is_refused_in_words(tiny_model, where, message):
    t = translate_sentence(tiny_model, SENTENCE)
    with pytest.raises(InsideHeadError, match=message):
        query_key_view(tiny_model, t, "cross", *where)


def test_the_last_layers_lens_is_the_models_output(case):
    """The last decoder layer through the output layer: the model's distribution, argmax rank 0."""
    lm, t = case
    p = lm.forced(t.src_ids, t.out_ids)
    lens_logp = lens_log_probs(lm, p.decoder_outputs)  # (L, T, V)
    assert torch.allclose(lens_logp[-1], p.logits[0].log_softmax(-1), atol=1e-5)
    lens = logit_lens(lm, t, k=3)
    assert (lens.chosen_rank[-1] == 0).all()  # greedy chose the top word at every step
    assert lens.chosen_prob[-1] == pytest.approx([r[0][1] for r in t.topk], abs=1e-4)
    top_is_chosen = np.array([[w[0] for w in layer] for layer in lens.top_words]) == np.array(
        lens.output_tokens
    )
    assert np.array_equal(top_is_chosen, lens.chosen_rank == 0)
    assert lens.top_probs.shape == (lm.model.cfg.num_decoder_layers, len(t.out_ids), 3)
    assert ("final_ln" in lens.projected) == lm.model.cfg.norm_first


def test_an_earlier_layer_can_rank_the_chosen_word_lower(tiny_model):
    t = translate_sentence(tiny_model, SENTENCE)
    lens = logit_lens(tiny_model, t)
    assert (lens.chosen_rank[0] > 0).any() or (lens.chosen_prob[0] < lens.chosen_prob[-1]).any()
    rows = lens.rows()
    assert [r["chosen"] for r in rows] == t.output_tokens
    assert rows[0]["reads"] == "<bos>" and len(rows[0]["layers"]) == 2


# ----------------------------------------------------------------------------- figures


def test_the_qk_figures_keep_repeated_keys_apart_and_name_their_axes(tiny_model):
    t = translate_sentence(tiny_model, SENTENCE)
    v = query_key_view(tiny_model, t, "encoder", 0, 1, 3)
    vectors = figs.vectors_figure(v)
    assert [len(tr.z) for tr in vectors.data] == [1, len(v.key_tokens), len(v.key_tokens)]
    assert len(set(vectors.data[1].y)) == len(v.key_tokens)  # "the" twice: two rows
    assert vectors.layout.yaxis2.title.text == "source token (key)"
    assert "d_k" in vectors.layout.xaxis3.title.text
    scores = figs.scores_figure(v)
    assert np.allclose(scores.data[0].x, v.scores) and np.allclose(scores.data[2].x, v.weights)
    assert "mask" in [a.text for a in scores.layout.annotations]
    cross = figs.scores_figure(query_key_view(tiny_model, t, "decoder_self", 0, 0, 1))
    assert list(cross.data[1].text[-1]) == ["masked"]


def test_the_lines_view_draws_a_line_per_pair_with_its_weight_as_opacity():
    w = np.array([[[0.7, 0.3], [0.005, 0.995]]], dtype=np.float32)  # (1 head, 2 q, 2 k)
    fig = figs.lines_figure(w, ["a", "a"], ["x", "y"], "cross", [2], "t")
    lines = [tr for tr in fig.data if tr.mode == "lines" and not tr.showlegend]
    assert sum(len(tr.x) // 3 for tr in lines) == 3  # 0.005 is under MIN_LINE_WEIGHT
    assert {round(tr.opacity, 2) for tr in lines} == {0.75, 0.35, 0.95}
    assert {tr.line.color for tr in lines} == {figs.HEAD_COLORS[2]}
    texts = [tr for tr in fig.data if tr.mode == "markers+text"]
    assert [list(tr.text) for tr in texts] == [["a", "a"], ["x", "y"]]
    only = figs.lines_figure(w, ["a", "a"], ["x", "y"], "cross", [2], "t", ("key", 0))
    ends = [y for tr in only.data if tr.mode == "lines" for y in tr.y[1::3]]
    assert ends == [0]  # only key 0's lines are left (key 0 from query 1 is too light)
    heads = figs.lines_figure(np.concatenate([w, w]), ["a", "a"], ["x", "y"], "cross", [0, 1], "t")
    assert [tr.name for tr in heads.data if tr.showlegend] == ["head 0", "head 1"]


@pytest.mark.parametrize("color_by", LENS_COLORS)
def test_the_logit_lens_chart_writes_each_layers_top_word(tiny_model, color_by):
    t = translate_sentence(tiny_model, SENTENCE)
    lens = logit_lens(tiny_model, t)
    fig = logit_lens_figure(lens, color_by)
    trace = fig.data[0]
    assert np.shape(trace.z) == (len(t.output_tokens), 2)
    chosen = [plotly_text(w) for w in t.output_tokens]
    assert [row[-1] for row in trace.text] == chosen  # the last layer's top: the chosen word
    assert len(set(trace.y)) == len(t.output_tokens)
    assert fig.layout.xaxis.title.text.startswith("decoder layer")
    with pytest.raises(ValueError, match="Colour by"):
        logit_lens_figure(lens, "entropy")


# ----------------------------------------------------------------------------- the command


def test_the_command_prints_the_qk_view_as_the_library_makes_it(tiny_checkpoint, capsys):
    args = ["--checkpoint", str(tiny_checkpoint), "--sentence", SENTENCE, "--kind"]
    assert command.main([*args, "decoder_self", "--layer", "1", "--head", "3", "--query", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    lm = StudioModel.load(tiny_checkpoint)
    v = query_key_view(lm, translate_sentence(lm, SENTENCE), "decoder_self", 1, 3, 2)
    assert out["mask"] == v.mask.tolist() and out["key_tokens"] == v.key_tokens
    assert np.allclose(out["weights"], v.weights, atol=1e-6)


def test_the_command_prints_the_logit_lens_one_line_per_step(bpe_run, capsys):
    ck = str(bpe_run / "last.pt")
    assert command.main(["--checkpoint", ck, "--sentence", SENTENCE, "--logit-lens"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in rows] == list(range(len(rows)))
    assert all(r["layers"][-1]["chosen_rank"] == 0 for r in rows)
    assert all(len(layer["top"]) == 5 for r in rows for layer in r["layers"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kind", "attn"], "unknown attention kind 'attn'"),
        (["--layer", "4"], "Layer 4: this model has 2 decoder layers"),
        (["--head", "-1"], "--head: must be a whole number from 0"),
        (["--query", "50"], "Query 50 is outside"),
        (["--logit-lens", "--top", "0"], "--top: must be"),
        (["--logit-lens", "--head-roles"], "--head-roles: not allowed with argument --logit-lens"),
        (["--logit-lens", "--layer", "1", "--head", "2"], "--layer/--head pick one head's q·k"),
        (["--head-roles", "--kind", "encoder"], "--kind pick one head's q·k view"),
        (["--top", "3"], "--top counts the logit lens's words"),
    ],
)
def test_bad_input_is_a_one_line_error_and_exit_2(tiny_checkpoint, capsys, extra, message):
    args = ["--checkpoint", str(tiny_checkpoint), "--sentence", SENTENCE, *extra]
    assert command.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert command.main(["--checkpoint", str(tmp_path / "no.pt"), "--sentence", "hi ."]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_the_head_view_s_defaults_are_the_parser_s():
    """HEAD_VIEW (what --logit-lens and --head-roles refuse to be given) holds the defaults."""
    args = command.build_parser().parse_args(["--checkpoint", "x", "--sentence", "hi"])
    assert {k: getattr(args, k) for k in command.HEAD_VIEW} == command.HEAD_VIEW
