"""The conformance suite of the decoder-only families (GPT-2, Llama, Qwen2, Mistral), each a
tiny random model with its real hub checkpoints' flags (``tests/lm_tiny.py``), read through the
one interface as a prompted translator (``core.model.prompted``): every invariant the sections
that read it rely on, checked against the model's own computation from ids (one forward of the
whole prompt; a translation against ``generate``: tests/test_conformance.py)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from core.alignment.extract import pair_maps
from core.attention.ablation import HeadSpec, HeadSpecError, all_heads, heads_of
from core.attention.head_measures import Measures
from core.attention.head_roles import (
    REPEATED_TOKENS,
    ROLE_SHARE,
    AttentionRoles,
    head_roles,
    repeated_tokens,
)
from core.attention.patch_sites import Component
from core.attention.patching import components, patch
from core.attribution.methods import METHODS
from core.corpus.splits import Split
from core.measure.sample import sample_of
from core.model import lm_sites
from core.model.architectures import ARCHITECTURES
from core.model.hf_folder import HFModelError, describe, size_label
from core.model.hooks import capture
from core.model.lm_loading import held_dtype
from core.model.opened import open_model
from core.model.parts import DEFAULT_TEMPLATE, DecodeSettings, TranslationError
from core.model.prompted import PromptedModel
from tests import helpers
from tests.lm_tiny import KV_HEADS, LM_FAMILIES, LM_REAL_FLAGS

SOURCE, TARGET = "i am cold .", "je suis froid ."
SETTINGS = DecodeSettings(max_len=8)


@pytest.fixture(scope="module", params=LM_FAMILIES)
def lm(request, lm_loaded) -> PromptedModel:
    return lm_loaded[request.param]


def own_pass(lm: PromptedModel, src_ids, out_ids):
    """The model's own forward of the whole prompt and output: (logits (N, V), L x (H, N, N)
    weights, L + 1 hidden states (N, D)), and (source positions, decoder-input positions)."""
    tgt_in = lm.decoder_inputs(out_ids)
    ids = torch.tensor([[*lm.layout.prompt(src_ids), *out_ids[:-1]]])
    with torch.no_grad():
        o = lm.model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    spans = lm.layout.spans(len(src_ids), len(tgt_in))
    return o.logits[0], [w[0] for w in o.attentions], [h[0] for h in o.hidden_states], spans


def test_the_folder_is_described_from_its_config_and_headers(lm_models):
    for family in LM_FAMILIES:
        folder = lm_models[family]
        info = describe(folder)
        assert info["family"] == "language model" and info["model_type"] == family
        label = size_label(info)
        kv = KV_HEADS[family]
        heads = "4 heads" + (f" ({kv} key/value head{'s' * (kv != 1)})" if kv < 4 else "")
        assert f"32 wide · 2 layers · {heads}" in label
        assert ARCHITECTURES[family].positions in label  # learned, rope, alibi
        assert ("sliding window 6" in label) == (family in ("mistral", "gemma2"))
        config = json.loads((folder / "config.json").read_text())
        for flag, value in LM_REAL_FLAGS[family].items():  # saved as the real checkpoints ship
            assert config.get(flag, value) == value, (family, flag)


def test_the_three_kinds_are_causal_blocks_of_one_attention(lm):
    """(That they are the model's own weights, and its probabilities the model's own, for
    every family: tests/test_conformance.py.)"""
    t = lm.translate(SOURCE, SETTINGS)
    assert torch.all(t.attention.encoder.triu(1) == 0)  # causal: no token sees a later one
    assert torch.all(t.attention.cross.sum(-1) <= 1 + 1e-5)  # the rest is on the template


def test_a_padded_batch_equals_each_sentence_alone(lm):
    rows = [(lm.source(s).ids, lm.target_ids(f)) for s, f in ((SOURCE, TARGET), ("i am .", "je ."))]
    S, T = (max(len(r[i]) for r in rows) for i in (0, 1))
    src = torch.full((2, S), lm.pad_id)
    tgt = torch.full((2, T), lm.pad_id)
    for b, (s, out) in enumerate(rows):
        src[b, : len(s)] = torch.tensor(s)
        tgt[b, : len(out)] = torch.tensor(lm.decoder_inputs(out))
    with torch.no_grad():
        patterns, logits = lm.patterns(src, tgt), lm.run(src, tgt)
        streams = {side: lm.stream(src, tgt, side) for side in ("encoder", "decoder")}
    for b, (s, out) in enumerate(rows):
        own_logits, weights, hidden, (source, steps) = own_pass(lm, s, out)
        own = torch.stack(weights)
        n, m = len(s), len(out)
        assert torch.allclose(
            patterns["cross"][:, b, :, :m, :n], own[:, :, steps, source], atol=1e-6
        )
        assert torch.all(patterns["cross"][:, b, :, :, n:] == 0)  # no source past its own
        assert torch.allclose(logits[b, :m], own_logits[steps], atol=1e-5)
        for side, at in (("encoder", source), ("decoder", steps)):
            stream = streams[side]
            assert len(stream) == lm.depth[1] + 1
            for layer in range(lm.depth[1]):  # each layer's input is the model's hidden state
                assert torch.allclose(
                    stream[layer][b, : at.stop - at.start], hidden[layer][at], atol=1e-5
                )


def test_a_gold_pair_is_read_from_the_cross_block(lm):
    pair = (["i", "am", "cold", "."], ["je", "suis", "froid", "."])
    [maps] = pair_maps(lm, [pair, (["i", "am", "."], ["je", "suis", "."])])[:1]
    w = lm.word_pair(*pair)
    assert w.src_ids[-1] == lm.layout.after[0]  # the template's first id ends the source
    _, weights, _, (source, steps) = own_pass(lm, w.src_ids, w.out_ids)
    own = torch.stack(weights)[:, :, steps, source][:, :, w.target_rows(), w.source_columns()]
    assert maps.src_words.tolist() == w.src_words and maps.tgt_words.tolist() == w.tgt_words
    assert maps.cross.shape == tuple(own.shape)
    assert torch.allclose(torch.from_numpy(maps.cross), own, atol=1e-6)


def test_head_roles_are_the_models_own_weights(lm):
    t = lm.translate(SOURCE, SETTINGS)
    (r,) = head_roles(lm, t).attentions  # its one attention, over its whole sequence
    assert r.kind == "sequence" and list(r.scores) == ["previous", "first", "duplicate",
                                                       "induction"]  # fmt: skip
    _, weights, _, _ = own_pass(lm, t.src_ids, t.out_ids)
    own = torch.stack(weights).numpy()  # (L, H, N, N)
    n = own.shape[-1]
    assert r.tokens == n
    rows = np.arange(1, n)
    assert np.allclose(r.scores["previous"], own[..., rows, rows - 1].mean(-1), atol=1e-6)
    assert np.allclose(r.scores["first"], own[..., 1:, 0].mean(-1), atol=1e-6)
    copy = repeated_tokens(lm)[1]  # the output side's tokens: its one sequence
    twice = [*lm.start_ids(), *copy, *copy]
    start, k = len(lm.start_ids()), REPEATED_TOKENS
    assert len(set(copy)) == k and not set(copy) & lm.special_ids()
    with torch.no_grad():
        seen = torch.stack(
            lm.model(input_ids=torch.tensor([twice]), output_attentions=True).attentions
        )
    i = np.arange(k)  # each token of the second copy, its first occurrence at start + i
    second = seen[:, 0][..., start + k + i, :]  # (L, H, k, N)
    assert np.allclose(r.scores["duplicate"], second[..., i, start + i].mean(-1), atol=1e-6)
    assert np.allclose(r.scores["induction"], second[..., i, start + i + 1].mean(-1), atol=1e-6)


def test_the_roles_figure_draws_every_roles_scores(lm):
    """Issue 67: the duplicate-token score beside previous-token, first-token and induction."""
    from core.figures.head_roles import head_roles_figure

    (r,) = head_roles(lm, lm.translate(SOURCE, SETTINGS)).attentions
    fig = head_roles_figure(r)
    assert [a.text for a in fig.layout.annotations] == list(r.grids())
    assert list(r.grids()) == ["previous-token", "first-token sink", "duplicate-token",
                               "induction"]  # fmt: skip
    for trace, grid in zip(fig.data, r.grids().values()):
        assert np.allclose(trace.z, grid, atol=1e-6)


def test_a_role_is_named_only_where_its_weight_reaches_the_share():
    grid = np.zeros((2, 3))
    previous, first, duplicate, induction = grid.copy(), grid.copy(), grid.copy(), grid.copy()
    previous[0, 1], first[1, 2], induction[1, 2] = ROLE_SHARE, 0.9, ROLE_SHARE - 0.01
    duplicate[0, 0] = 0.5
    scores = {"previous": previous, "first": first, "duplicate": duplicate,
              "induction": induction}  # fmt: skip
    r = AttentionRoles("sequence", scores, 10, 24)
    assert r.roles(0, 1) == ["previous-token"] and r.roles(1, 2) == ["first-token sink"]
    assert r.roles(0, 0) == ["duplicate-token"] and r.roles(0, 2) == [] and len(r.rows()) == 6
    assert r.rows()[1] | {} == {"kind": "sequence", "layer": 0, "head": 1, "previous": 0.4,
                               "first": 0.0, "duplicate": 0.0, "induction": 0.0,
                               "roles": ["previous-token"]}  # fmt: skip


def test_a_template_is_cut_never_formatted(lm):
    other = lm.with_prompt("Translate {src} into French:")
    assert other.model is lm.model and other.template != lm.template
    assert lm.with_prompt("") is lm  # "" is the default
    t = other.translate(SOURCE, SETTINGS)
    assert t.decoder_inputs[0] == other.target_tokens([other.layout.after[-1]])[0]
    for bad, words in (
        ("English: {src} {src}", "exactly once"),
        ("no slot", "exactly once"),
        ("English: {src}", "text after"),
        ("{src}" + "x" * 400, "characters"),
    ):
        with pytest.raises(TranslationError, match=words):
            lm.translate(SOURCE, DecodeSettings(prompt=bad))
    weird = lm.with_prompt("{0} {src.__class__} {{x}}: {src}\nFr:")  # braces stay text
    assert weird.translate(SOURCE, SETTINGS).src_ids == lm.source(SOURCE).ids


def test_what_it_cannot_do_is_said_in_one_line(lm):
    assert lm.supports("training") is None  # decided from the disk: capabilities.replay_problem
    assert lm.supports("maps") is None and lm.supports("alignment") is None
    assert lm.supports("lens") is None and lm.supports("ablation") is None
    assert lm.supports("inside") is None and lm.supports("project") is None
    assert lm.supports("patch") is None and lm.supports("attribution") is None
    refuses = ARCHITECTURES[lm.model_type].refuses  # Falcon's parallel residual
    for method in METHODS:  # every attribution method, but those its row refuses
        assert lm.supports(method) == refuses.get(method)
        assert "\n" not in (lm.supports(method) or "")
    src, tgt_in, _ = lm.forced_batch(lm.source(SOURCE).ids, lm.target_ids(TARGET))
    whole = lm.record(src, tgt_in).one_stack  # its one attention over the whole sequence
    assert len(whole.attention) == len(whole.layer_outputs) == lm.cfg.num_decoder_layers


# ----------------------------------------------------------------------------- opening


def test_open_model_returns_a_prompted_model(lm_models):
    m = open_model(str(lm_models["qwen2"]))
    assert isinstance(m, PromptedModel) and m.template == DEFAULT_TEMPLATE
    assert m.meta["dtype"] == "float32" and m.family == "language model"


def edited(folder, tmp_path, **changes):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text()) | changes
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_a_model_needing_remote_code_or_of_another_kind_is_refused(lm_models, tmp_path):
    """Remote code, a family without a row (MPT), a family's config that is not as its row
    reads it (Falcon-40B's new decoder architecture, the RW models' ALiBi, BLOOM's sliced W_o),
    a model of another kind: each refused in one line."""
    folder = lm_models["llama"]
    with pytest.raises(HFModelError, match="remote code"):
        describe(edited(folder, tmp_path / "a", auto_map={"AutoModelForCausalLM": "x.Y"}))
    with pytest.raises(HFModelError, match="decoder-only models of the families"):
        describe(edited(folder, tmp_path / "b", model_type="mpt", architectures=["MptForCausalLM"]))
    for family, flag, value in (
        ("falcon", "new_decoder_architecture", True),  # Falcon-40B's
        ("falcon", "alibi", True),
        ("bloom", "slow_but_exact", True),
    ):
        with pytest.raises(HFModelError) as err:  # its modules are not where its row says
            describe(edited(lm_models[family], tmp_path / f"{family}{flag}", **{flag: value}))
        shipped = json.dumps(not value)
        assert str(err.value) == (
            f"The studio reads a {family} as its checkpoints ship it ({flag} {shipped}); "
            f"this one's {flag} is {json.dumps(value)}."
        )
    with pytest.raises(HFModelError, match="none of them"):
        describe(edited(folder, tmp_path / "c", model_type="vit", architectures=["ViTModel"]))


def test_pickled_weights_are_never_opened(lm_models, tmp_path):
    import shutil

    copy = tmp_path / "bin"
    shutil.copytree(lm_models["gpt2"], copy)
    (copy / "model.safetensors").rename(copy / "pytorch_model.bin")
    with pytest.raises(HFModelError, match="safetensors"):
        describe(copy)


def test_the_memory_limit_counts_the_dtype_the_server_holds(monkeypatch):
    from core.model import lm_loading

    assert held_dtype(100, 400, "cpu") == torch.float32
    monkeypatch.setattr(lm_loading, "native_bfloat16", lambda device: True)
    assert held_dtype(150, 400, "cpu") == torch.bfloat16  # 600 B in float32, 300 B in bf16
    monkeypatch.setattr(lm_loading, "native_bfloat16", lambda device: False)
    with pytest.raises(HFModelError, match="no native bfloat16"):
        held_dtype(150, 400, "cpu")
    with pytest.raises(HFModelError, match="at most"):
        held_dtype(1000, 400, "cpu")


# ----------------------------------------------------------------------------- heads


def removed_by_hand(lm: PromptedModel, heads) -> torch.nn.Module:
    """A copy of the model whose W_o ignores ``heads`` (layer, head): their columns zeroed."""
    model = copy.deepcopy(lm.model)
    with torch.no_grad():
        for layer, head in heads:
            w_o = lm_sites.output_projection(
                lm_sites.attention_of(lm_sites.layers_of(model)[layer])
            )
            inputs = w_o.weight.size(1 if isinstance(w_o, torch.nn.Linear) else 0)
            width = inputs // lm.cfg.num_heads  # a head's width (Gemma's is not D / H)
            cols = slice(head * width, (head + 1) * width)
            if isinstance(w_o, torch.nn.Linear):
                w_o.weight[:, cols] = 0.0  # (D, H * Dh): a head's inputs are columns
            else:  # GPT-2's Conv1D keeps W_o as (H * Dh, D): its inputs are rows
                w_o.weight[cols, :] = 0.0
    return model


def test_the_three_blocks_heads_are_the_same_heads(lm):
    """A head removed by any of the three kinds is the one attention's head (removing a head
    itself equals zeroing its W_o columns: tests/test_conformance.py, every configuration)."""
    src = torch.tensor([lm.source(SOURCE).ids])
    tgt_in = torch.tensor([lm.decoder_inputs(lm.target_ids(TARGET))])
    with torch.no_grad(), lm.heads_removed([("decoder_self", 1, 2)]):
        removed = lm.run(src, tgt_in)
    for kind in ("encoder", "cross"):
        with torch.no_grad(), lm.heads_removed([(kind, 1, 2)]):
            assert torch.allclose(lm.run(src, tgt_in), removed, atol=1e-6), kind


def test_a_head_spec_names_the_one_kind(lm):
    """(Each row keeping its own heads, for every family: tests/test_conformance.py.)"""
    assert [h.kind for h in all_heads(lm.cfg, lm.head_kinds)] == ["decoder_self"] * 8
    with pytest.raises(HeadSpecError, match="decoder-only"):
        heads_of("cross:0:1", lm.cfg, lm.head_kinds)


def test_head_importance_measures_the_language_models_loss_with_heads_removed(lm):

    sample = sample_of(lm, Split(helpers.word_pairs(6)), 6)
    sets = [
        [],
        [HeadSpec("decoder_self", 0, 1)],
        [HeadSpec("decoder_self", 1, h) for h in range(4)],
        [HeadSpec("decoder_self", 1, 3), HeadSpec("decoder_self", 0, 2)],
        [],
    ]  # run again from layer 0, 1 and 0 (``core.model.resumed``), then the whole pass again
    measures = Measures(lm, sample)
    losses = measures.losses(sets)
    for heads, got in zip(sets, losses):
        model = removed_by_hand(lm, [(h.layer, h.head) for h in heads])
        total, count = 0.0, 0
        for src, tgt in sample.encoded:  # one pair at a time, the whole prompt
            ids = torch.tensor([[*lm.layout.prompt(src), *tgt[:-1]]])
            _, steps = lm.layout.spans(len(src), len(tgt))
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, steps]
            total += float(
                torch.nn.functional.cross_entropy(logits, torch.tensor(tgt), reduction="sum")
            )
            count += len(tgt)
        assert got == pytest.approx(total / count, abs=1e-5)
    outputs = measures.output_ids(sets[:2])
    for src, ids in zip(sample.src_ids, outputs[0]):
        assert ids[: len(alone := lm.continuation(lm.layout.prompt(src), len(ids)))] == alone
    scores = measures.gradients()
    assert len(scores) == 2 * 4 and all(v >= 0 for v in scores.values())


# ----------------------------------------------------------------------------- patching


def test_the_stream_sites_are_the_layers_outputs_at_the_sentence_and_the_steps(lm):
    rows = [(lm.source(s).ids, lm.target_ids(f)) for s, f in ((SOURCE, TARGET), ("i am .", "je ."))]
    S, T = (max(len(r[i]) for r in rows) for i in (0, 1))
    src, tgt = torch.full((2, S), lm.pad_id), torch.full((2, T), lm.pad_id)
    for b, (s, out) in enumerate(rows):
        src[b, : len(s)], tgt[b, : len(out)] = torch.tensor(s), torch.tensor(lm.decoder_inputs(out))
    seen: dict = {}
    sites = [f"{side}.{i}.out" for side in ("encoder", "decoder") for i in range(lm.depth[1])]
    with torch.no_grad(), lm.hooks((s, capture(seen)) for s in sites):
        lm.run(src, tgt)
    for b, (s, out) in enumerate(rows):
        _, _, hidden, (source, steps) = own_pass(lm, s, out)
        for i in range(lm.depth[1] - 1):  # layer i's output is layer i + 1's input
            n, m = len(s), len(out)
            assert torch.allclose(seen[f"encoder.{i}.out"][b, :n], hidden[i + 1][source], atol=1e-5)
            assert torch.allclose(seen[f"decoder.{i}.out"][b, :m], hidden[i + 1][steps], atol=1e-5)


def test_patching_reads_the_decoder_only_model_through_its_sites(lm):
    clean, corrupt = "the boy is tall .", "you are tall ."  # one length in every tiny vocabulary
    assert len(lm.source(clean).ids) == len(lm.source(corrupt).ids)
    last = lm.depth[1] - 1
    chosen = [
        Component("decoder_stream", last, position=0),  # the one step the metric reads
        Component("encoder_stream", last, position=2),  # the last layer's output: nothing reads it
        Component("decoder_self", 0, 1),
    ]
    result = patch(lm, clean, corrupt, chosen, prefix="", answers=("the", "he"))  # one piece each
    effects = [r["effect"] for r in result.rows]
    assert effects[0] == pytest.approx(1.0, abs=1e-4)
    assert effects[1] == pytest.approx(0.0, abs=1e-4)
    assert np.isfinite(effects[2])
    every = components(lm, len(lm.source(clean).ids), 1)
    assert {c.kind for c in every} == {"decoder_self", "encoder_stream", "decoder_stream"}


# ----------------------------------------------------------------------------- attribution
