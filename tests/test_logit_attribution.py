"""Direct logit attribution (``core.attention.logit_attribution``, ``core.model.stream_terms``)
on every family of the conformance suite: the terms sum to the model's own logit (difference)
from ids, a head's term is TransformerLens's by-hand z_h W_O^h through the frozen final norm
onto the unembedding (GPT-2, Llama), the accumulated stream ends at the logit, and the command
prints the library's figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core import logit_attribution as command
from core.attention.logit_attribution import (
    LogitAttributionError,
    logit_attribution,
)
from core.attribution.contrast import foil_at
from core.attribution.methods import AttributionError
from core.figures.logit_attribution import layer_bars, logit_attribution_figure
from core.model import lm_sites
from core.model.parts import DecodeSettings
from core.model.studio_model import StudioModel
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES
from tests.test_conformance import perturbed, studio

SOURCE, TARGET = "i am cold .", "je suis froid ."
SETTINGS = DecodeSettings(max_len=6)
ATTRIBUTED_LMS = tuple(f for f in LM_FAMILIES if f != "gemma2")  # Gemma 2: refused


@pytest.fixture(scope="module")
def studios() -> dict:
    """The studio's Transformer, post-LN and pre-LN, every parameter perturbed."""
    return {"studio post-LN": studio(False), "studio pre-LN": studio(True)}


def own_logits(m, t, step: int) -> torch.Tensor:
    """(V,) the logits of output step ``step``, from the model's own forward from ids (not
    through the interface): the reference every sum is checked against."""
    src = torch.tensor([t.src_ids])
    tgt_in = torch.tensor([m.decoder_inputs(t.out_ids)])
    with torch.no_grad():
        if isinstance(m, StudioModel):
            return m.model(src, tgt_in)[0][0, step]
        if m.one_sequence and m.supports("decoding") is None:  # a prompted model: one sequence
            ids = torch.tensor([m.sequence_ids(t.src_ids, t.out_ids)])
            return m.model(input_ids=ids).logits[0, ids.size(1) - len(t.out_ids) + step]
        if m.one_sequence:  # a masked LM: at its mask
            return m.model(input_ids=src).logits[0, m.positions(t.src_ids)[step]]
        return m.model(input_ids=src, decoder_input_ids=tgt_in).logits[0, step]


def check_sums(m, t) -> None:
    """At the first and the last step: the logit equals the terms' sum within 1e-5, and the
    accumulated stream's last entry is the logit; at the last, a logit difference too."""
    for step in sorted({0, len(t.out_ids) - 1}):
        logits = own_logits(m, t, step)
        a = logit_attribution(m, t, step)
        assert a.logit == pytest.approx(float(logits[t.out_ids[step]]), abs=1e-5)
        assert a.total == pytest.approx(a.logit, abs=1e-5)
        assert a.accumulated()[-1]["value"] == pytest.approx(a.logit, abs=1e-5)
        assert sum(r["value"] for r in a.per_layer()) == pytest.approx(a.logit, abs=1e-5)
    answer, wrong = typed(m, logits)
    d = logit_attribution(m, t, step, answer, wrong)
    assert d.ids == (m.target_token_id(answer), m.target_token_id(wrong))
    own = float(logits[d.ids[0]] - logits[d.ids[1]])
    assert d.logit == pytest.approx(own, abs=1e-5) and d.total == pytest.approx(own, abs=1e-5)


def typed(m, logits: torch.Tensor) -> tuple[str, str]:
    """The two likeliest tokens a user can type (shown tokens that read back as themselves)."""
    found = []
    for i in logits.argsort(descending=True).tolist():
        token = m.target_tokens([i])[0]
        if m.target_token_id(token) == i:
            found.append(token)
        if len(found) == 2:
            return found[0], found[1]
    raise AssertionError("no two typeable tokens")


@pytest.mark.parametrize("name", ["studio post-LN", "studio pre-LN"])
def test_the_studio_models_terms_sum_to_its_logit(studios, name):
    m = studios[name]
    t = m.translate(SOURCE, SETTINGS)
    check_sums(m, t)
    a = logit_attribution(m, t, 0)
    assert a.attentions == ["self", "cross"]  # the encoder reaches the step through cross heads
    kinds = {r["kind"] for r in a.rows}
    assert {"embed", "head", "attention bias", "mlp", "norm bias", "output bias"} == kinds
    norms = [r["sublayer"] for r in a.rows if r["kind"] == "norm bias"]
    L = m.depth[1]
    # post-LN: each of the three AddNorms of every layer; pre-LN: the final norm only
    assert norms == (["final"] if name.endswith("pre-LN") else ["self", "cross", "mlp"] * L)


@pytest.mark.parametrize("family", CONFORMANCE)
def test_an_encoder_decoders_terms_sum_to_its_logit(hf_models, family):
    from core.model.hf_model import load

    m = load(hf_models[family])
    perturbed(m.model, 2)  # norms' gains and biases away from 1 and 0
    t = m.force(SOURCE, TARGET, SETTINGS)
    check_sums(m, t)
    a = logit_attribution(m, t)
    assert a.attentions == ["self", "cross"]
    assert a.heads == m.cfg.num_heads and a.layers == m.depth[1]


@pytest.mark.parametrize("family", ATTRIBUTED_LMS)
def test_a_decoder_only_models_terms_sum_to_its_logit(lm_loaded, family):
    m = lm_loaded[family]
    check_sums(m, m.force(SOURCE, TARGET, SETTINGS))


@pytest.mark.parametrize("family", ENCODER_FAMILIES)
def test_a_masked_lms_terms_sum_to_its_logit_at_the_mask(lm_loaded, family):
    m = lm_loaded[family]
    t = m.translate(f"the boy is {m.mask_token} .", SETTINGS)
    check_sums(m, t)
    a = logit_attribution(m, t)
    assert a.position == t.src_ids.index(m.mask_id)
    assert any(r["kind"] == "output bias" for r in a.rows)  # the head's dense and decoder


def test_gemma_2_is_refused_in_one_line(lm_loaded):
    m = lm_loaded["gemma2"]
    with pytest.raises(LogitAttributionError, match="soft-caps its logits"):
        logit_attribution(m, m.force(SOURCE, TARGET, SETTINGS))


# ----------------------------------------------------------------------------- by hand


@torch.no_grad()
def by_hand(m, t, step: int, answer: int) -> np.ndarray:
    """(L, H) TransformerLens's direct logit attribution of each head, computed here from the
    weights: z_h W_O^h, centred (LayerNorm) and divided by the final norm's scale at this
    position, times its weight, onto W_U[:, answer]."""
    ids = torch.tensor([m.sequence_ids(t.src_ids, t.out_ids)])
    p = ids.size(1) - len(t.out_ids) + step
    layers = lm_sites.layers_of(m.model)
    norm = lm_sites.final_norm(m.model)
    z, final = {}, {}
    hooks = [
        lm_sites.output_projection_of(layer).register_forward_pre_hook(
            lambda mod, args, i=i: z.__setitem__(i, args[0][0, p])
        )
        for i, layer in enumerate(layers)
    ]
    hooks.append(norm.register_forward_pre_hook(lambda mod, args: final.update(x=args[0][0, p])))
    with torch.no_grad():
        m.model(input_ids=ids)
    for h in hooks:
        h.remove()
    x = final["x"].double()
    layer_norm = isinstance(norm, torch.nn.LayerNorm)
    centred = x - x.mean() if layer_norm else x
    eps = norm.eps if layer_norm else norm.variance_epsilon
    scale = torch.sqrt(centred.pow(2).mean() + eps)
    w_u = m.model.get_output_embeddings().weight[answer].double()  # (D,)
    H = m.model.config.num_attention_heads
    grid = np.zeros((len(layers), H))
    for i, layer in enumerate(layers):
        w_o = lm_sites.output_projection_of(layer).weight.double()
        Dh = w_o.shape[0 if layer_norm else 1] // H  # GPT-2's Conv1D keeps (in, out)
        for h in range(H):
            zh = z[i][h * Dh : (h + 1) * Dh].double()
            cut = w_o[h * Dh : (h + 1) * Dh] if layer_norm else w_o[:, h * Dh : (h + 1) * Dh].T
            term = zh @ cut  # (D,)
            term = term - term.mean() if layer_norm else term
            grid[i, h] = float(term / scale * norm.weight.double() @ w_u)
    return grid


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_each_heads_term_is_transformer_lenss_by_hand(lm_loaded, family):
    m = lm_loaded[family]
    t = m.force(SOURCE, TARGET, SETTINGS)
    for step in (0, len(t.out_ids) - 1):
        a = logit_attribution(m, t, step)
        expected = by_hand(m, t, step, t.out_ids[step])
        assert np.abs(a.head_grid("self") - expected).max() < 1e-5
        assert np.abs(expected).max() > 1e-3  # the heads do write something


# ----------------------------------------------------------------------------- errors, figure


def test_a_step_or_word_the_model_lacks_is_one_line(studios):
    m = studios["studio post-LN"]
    t = m.translate(SOURCE, SETTINGS)
    with pytest.raises(LogitAttributionError, match="this output has steps 0"):
        logit_attribution(m, t, len(t.out_ids))
    with pytest.raises(LogitAttributionError, match="no output token 'zzz'"):
        logit_attribution(m, t, 0, "zzz")


def test_a_word_a_model_without_an_unknown_token_lacks_is_refused(lm_loaded):
    """A byte-level tokenizer has no unknown token: a word it lacks (or reads as several
    pieces) read back as the end token, which was explained as the answer without a word."""
    m = lm_loaded["llama"]
    assert m.unk_id is None
    t = m.force(SOURCE, TARGET, SETTINGS)
    for word in ("zzzqqq", "suis"):  # none; several pieces
        with pytest.raises(LogitAttributionError, match=f"no output token '{word}'"):
            logit_attribution(m, t, 0, word)
        with pytest.raises(AttributionError, match=f"no output token '{word}'"):
            foil_at(m, t, 0, word)
    end = m.target_tokens([m.eos_id])[0]
    assert logit_attribution(m, t, 0, end).ids[0] == m.eos_id  # the end token by its name


@pytest.mark.parametrize("family", ["marian-spm", "marian", "bart", "llama", "gpt2"])
def test_a_token_typed_as_the_translation_shows_it_is_that_token(hf_loaded, lm_loaded, family):
    """Audit: a word's first piece shown as 's' ('▁s', 'Ġs') read back as its continuing twin
    's' (shown '##s') wherever the vocabulary had both, and '␣' (the mark alone) as nothing:
    another token's logit was explained under the same label."""
    m = hf_loaded.get(family) or lm_loaded[family]
    t = m.force(SOURCE, TARGET, SETTINGS)
    assert [m.target_token_id(token) for token in t.output_tokens] == list(t.out_ids)
    if m.meta.get("tokens") != "pieces":  # both forms in this vocabulary: told apart
        assert {"s", "f", "##e"} <= set(t.output_tokens) and "␣" in t.output_tokens
    step = len(t.out_ids) - 2
    typed = logit_attribution(m, t, step, t.output_tokens[step])
    assert typed.ids == logit_attribution(m, t, step).ids and typed.answer == t.output_tokens[step]


def test_the_figure_draws_the_grids_the_bars_and_the_accumulated_line(studios):
    m = studios["studio pre-LN"]
    a = logit_attribution(m, m.translate(SOURCE, SETTINGS), 1)
    fig = logit_attribution_figure(a)
    heat = [tr for tr in fig.data if tr.type == "heatmap"]
    assert [np.asarray(h.z).shape for h in heat] == [(m.depth[1], m.cfg.num_heads)] * 2
    assert np.allclose(heat[1].z, a.head_grid("cross"))
    bars = layer_bars(a)
    assert np.isclose(sum(v.sum() for v in bars.values()), a.logit, atol=1e-5)
    (line,) = [tr for tr in fig.data if tr.type == "scatter"]
    assert list(line.y) == [r["value"] for r in a.accumulated()]


# ----------------------------------------------------------------------------- the command


def test_the_commands_lines_are_the_librarys_figures(capsys):
    from core.model.opened import open_model
    from tests.helpers import SHIPPED

    argv = ["--checkpoint", str(SHIPPED), "--source", SOURCE, "--prefix", "je"]
    assert command.main([*argv, "--answer", "suis", "--wrong", "tu"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    m = open_model(str(SHIPPED))
    t = m.force(SOURCE, "je", DecodeSettings())
    a = logit_attribution(m, t, None, "suis", "tu")
    assert lines == json.loads(json.dumps(a.lines()))
    assert lines[-1]["answer"] == "suis" and lines[-1]["wrong"] == "tu"
    assert lines[-1]["sum"] == pytest.approx(lines[-1]["logit"], abs=1e-5)
    likeliest = logit_attribution(m, t, None, t.topk[-1][0][0])  # after a prefix: the default
    for view, flag in (("accumulated", "--accumulated"), ("per_layer", "--per-layer")):
        assert command.main([*argv, flag]) == 0
        printed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert printed == json.loads(json.dumps(likeliest.lines(view)))
    assert command.main([*argv, "--wrong", "tu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --wrong needs --answer: the logit difference of two words"
    )
