"""Head ablation: head specs, gates on both attention paths (per thread, through the model's
hook sites), importance, cache and commands."""

from __future__ import annotations

import json
import math

import pytest
import torch

from core import ablate as ablate_cmd
from core import translate as translate_cmd
from core.attention import head_measures
from core.attention import importance as hi
from core.attention.ablation import (
    HeadSpec,
    HeadSpecError,
    ablated,
    all_heads,
    check_heads,
    heads_of,
    parse_heads,
    spec_text,
)
from core.attention.head_measures import Measures
from core.attention.kinds import KINDS
from core.corpus.vocab import SPECIALS, Vocab
from core.measure.sample import validation_sample
from core.model import hooks
from core.model import scores as evaluate
from core.model.checkpoints import atomic_save, read_checkpoint, trained_data
from core.model.decode import translate, translate_batch
from core.model.studio_loading import load_checkpoint
from core.model.studio_model import StudioModel, attention_module
from core.model.transformer import Transformer
from tests.helpers import TINY, model_and_batch, toy_model_config

HEAD_KEYS = {"kind", "layer", "head", "bleu", "delta_bleu", "loss", "delta_loss"}


@pytest.fixture(autouse=True)
def runs_root(tmp_path, monkeypatch):
    """Cached importance results go to a temporary runs root."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def placeholder_vocab(size: int) -> Vocab:
    """A vocabulary of ``size`` made-up words (the toy model's passes never read its words)."""
    return Vocab(SPECIALS + [f"w{i}" for i in range(size - len(SPECIALS))])


@pytest.fixture
def toy():
    """(StudioModel, src, tgt): a seeded toy model (2 encoder, 3 decoder blocks, 4 heads), a
    batch."""
    model, src, tgt = model_and_batch(norm_first=False)
    cfg = model.cfg
    vocabs = placeholder_vocab(cfg.src_vocab_size), placeholder_vocab(cfg.tgt_vocab_size)
    return StudioModel(model, *vocabs), src, tgt


@pytest.fixture(scope="module")
def val_model(val_checkpoint):
    """(StudioModel, Sample of its 6 validation sentences)."""
    m = StudioModel.load(val_checkpoint)
    cfg = trained_data(m.meta, str(TINY))
    return m, validation_sample(m, cfg, 100)


def logits_of(m, src, tgt, need_weights=False):
    """The model's logits (B, T, V) on one batch."""
    with torch.no_grad():
        return m.run(src, tgt[:, :-1], need_weights=need_weights)


def gate_table(m, head_sets) -> dict:
    """{(kind, layer): (len(head_sets), H) gates}: row j is 0 at the heads set j removes."""
    table: dict = {}
    for row, heads in enumerate(head_sets):
        for h in heads:
            gate = table.setdefault((h.kind, h.layer), torch.ones(len(head_sets), m.cfg.num_heads))
            gate[row, h.head] = 0.0
    return table


def untouched(m, src, tgt, plain) -> bool:
    """No hook is on in any thread and the model computes exactly ``plain`` again."""
    return not hooks.any_on() and torch.equal(logits_of(m, src, tgt), plain)


# ----------------------------------------------------------------------------- head specs


def test_parse_heads_sorts_and_drops_repeats():
    heads = parse_heads(" cross:1:0 , encoder:0:2,cross:1:0,, decoder_self:2:3,")
    assert heads == [
        HeadSpec("encoder", 0, 2),
        HeadSpec("decoder_self", 2, 3),
        HeadSpec("cross", 1, 0),
    ]
    assert spec_text(heads) == "encoder:0:2,decoder_self:2:3,cross:1:0"
    assert parse_heads(spec_text(heads)) == heads
    assert parse_heads("") == [] and parse_heads(" , ") == []
    assert heads[2].label == "Cross L1 H0"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("cross:0", "is not KIND:LAYER:HEAD"),
        ("cross:0:1:2", "is not KIND:LAYER:HEAD"),
        ("self:0:1", "Unknown attention kind 'self'"),
        ("Cross:0:1", "Unknown attention kind"),
        ("cross:a:1", "whole numbers from 0"),
        ("cross:-1:0", "whole numbers from 0"),
        ("cross:0:²", "whole numbers from 0"),
        ("cross:0:1e3", "whole numbers from 0"),
        ("cross:0:" + "9" * 5000, "whole numbers from 0"),
    ],
)
def test_malformed_specs_say_what_is_wrong(spec, message):
    with pytest.raises(HeadSpecError, match=message) as e:
        parse_heads(f"encoder:0:0,{spec}")
    assert len(str(e.value)) < 200  # a long input is quoted short


@pytest.mark.parametrize(
    "spec, message",
    [
        ("encoder:2:0", r"encoder:2:0: this model has 2 encoder layers \(0..1\)"),
        ("decoder_self:3:0", r"3 decoder layers \(0..2\)"),
        ("cross:0:4", r"cross:0:4: this model has 4 heads per layer \(0..3\)"),
    ],
)
def test_heads_the_model_lacks_are_named(toy, spec, message):
    m, src, tgt = toy
    plain = logits_of(m, src, tgt)
    with pytest.raises(HeadSpecError, match=message):
        heads_of(spec, m.cfg)
    with pytest.raises(HeadSpecError, match=message), ablated(m, parse_heads(spec)):
        pass
    assert untouched(m, src, tgt, plain)


def test_all_heads_lists_every_head_once():
    cfg = toy_model_config(num_decoder_layers=3)
    heads = all_heads(cfg)
    assert len(heads) == 4 * (2 + 3 + 3) == len(set(heads))
    assert check_heads(heads, cfg) == heads


# ----------------------------------------------------------------------------- gates


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
def test_removing_no_head_is_exactly_the_model(toy, need_weights):
    m, src, tgt = toy
    plain = logits_of(m, src, tgt, need_weights)
    with ablated(m, []):
        assert torch.equal(logits_of(m, src, tgt, need_weights), plain)
    ones = {(k, i): torch.ones(4) for k in KINDS for i in range(m.layers(k))}
    with m.rows_gated(ones):
        assert torch.equal(logits_of(m, src, tgt, need_weights), plain)


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
@pytest.mark.parametrize("kind", KINDS)
def test_removing_every_head_of_a_kind_zeroes_its_attention_output(toy, kind, need_weights):
    """Equal to the model whose W_o input of that kind is zero (so W_o gives its bias)."""
    m, src, tgt = toy
    every = [h for h in all_heads(m.cfg) if h.kind == kind]
    with ablated(m, every):
        removed = logits_of(m, src, tgt, need_weights)
    handles = [
        attention_module(m, kind, i).W_o.register_forward_pre_hook(
            lambda mod, args: (torch.zeros_like(args[0]),)
        )
        for i in range(m.layers(kind))
    ]
    try:
        zeroed = logits_of(m, src, tgt, need_weights)
    finally:
        for handle in handles:
            handle.remove()
    assert torch.allclose(removed, zeroed, atol=1e-6)
    assert not torch.allclose(removed, logits_of(m, src, tgt), atol=1e-3)


@pytest.mark.parametrize(
    "spec", ["cross:0:1", "encoder:1:3,decoder_self:2:0", "encoder:0:0,decoder_self:1:2,cross:2:3"]
)
def test_both_attention_paths_honour_the_gates(toy, spec):
    m, src, tgt = toy
    with ablated(m, parse_heads(spec)):
        fused = logits_of(m, src, tgt, need_weights=False)
        explicit = logits_of(m, src, tgt, need_weights=True)
    assert torch.allclose(fused, explicit, atol=1e-5)
    assert not torch.allclose(fused, logits_of(m, src, tgt), atol=1e-4)


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
def test_per_sentence_gates_equal_separate_runs(toy, need_weights):
    """(B, H) gates: each row of a batch has its own heads removed."""
    m, src, tgt = toy
    sets = [[], parse_heads("cross:0:1,encoder:1:2"), parse_heads("decoder_self:2:3")]
    table = gate_table(m, sets)  # (kind, layer) -> (3, H)
    with m.rows_gated(table):  # row j of the batch uses set j
        together = logits_of(m, src, tgt, need_weights)
    for j, heads in enumerate(sets):
        with ablated(m, heads):
            alone = logits_of(m, src[j : j + 1], tgt[j : j + 1], need_weights)
        assert torch.allclose(together[j : j + 1], alone, atol=1e-5)


def test_gates_are_restored_after_an_error(toy):
    m, src, tgt = toy
    plain = logits_of(m, src, tgt)
    with pytest.raises(RuntimeError), ablated(m, parse_heads("cross:0:1,encoder:0:0")):
        assert hooks.any_on() and not torch.allclose(logits_of(m, src, tgt), plain, atol=1e-4)
        raise RuntimeError("boom")
    assert untouched(m, src, tgt, plain)


def test_gates_leave_the_state_dict_alone(toy):
    m, src, tgt = toy
    keys = set(m.model.state_dict())
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    with ablated(m, all_heads(m.cfg)):
        assert set(m.model.state_dict()) == keys
        Transformer(m.cfg).load_state_dict(m.model.state_dict(), strict=True)
        assert all(torch.equal(v, before[k]) for k, v in m.model.state_dict().items())


def test_a_removed_head_still_has_its_map(random_model):
    model, src_vocab, tgt_vocab = random_model
    head = HeadSpec("cross", 1, 2)
    with ablated(StudioModel(model, src_vocab, tgt_vocab), [head]):
        t = translate(model, src_vocab, tgt_vocab, "i am cold .")
    rows = t.attention.cross[1, 2].sum(-1)  # (T,)
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)


# ----------------------------------------------------------------------------- importance


def test_batched_bleu_equals_one_set_at_a_time(val_model, monkeypatch):
    """Sets packed into passes (split across passes, too) give translate_batch's BLEU."""
    m, sample = val_model
    monkeypatch.setattr(Measures, "rows_per_pass", lambda self: 4)  # passes cut through the sample
    sets = [[], parse_heads("cross:0:1"), parse_heads("cross:1:0,encoder:0:3,decoder_self:0:2")]
    batched = Measures(m, sample).bleu(sets)
    for heads, bleu in zip(sets, batched):
        with ablated(m, heads):
            hyps = translate_batch(m.model, m.src_vocab, m.tgt_vocab, sample.sources)
        assert bleu == pytest.approx(evaluate.corpus_bleu(hyps, sample.references))


def test_importance_table_has_one_row_per_head(val_model):
    m, sample = val_model
    seen = []
    result = hi.head_importance(m, sample, lambda f, what: seen.append(f))
    table = result.frame()
    heads = all_heads(m.cfg)
    assert len(table) == len(heads) == len(table[["kind", "layer", "head"]].drop_duplicates())
    assert HEAD_KEYS | {"gradient", "label"} <= set(table)
    assert (table["delta_bleu"] - (table["bleu"] - result.bleu)).abs().max() < 1e-9
    assert (table["delta_loss"] - (table["loss"] - result.loss)).abs().max() < 1e-9
    assert result.sentences == len(sample.sources) == 6 and result.pairs == len(sample.encoded)
    forced = [(src, [m.start_id, *out]) for src, out in sample.encoded]  # <bos> + output
    assert result.loss == pytest.approx(evaluate.evaluate_loss(m.model, forced))
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)


def test_pruning_curve_removes_the_least_important_first(val_model):
    m, sample = val_model
    result = hi.head_importance(m, sample)
    order = result.order()
    drops = {HeadSpec(r["kind"], r["layer"], r["head"]): -r["delta_bleu"] for r in result.heads}
    assert [drops[h] for h in order] == sorted(drops.values())
    curve = result.pruning
    assert [p["removed"] for p in curve] == list(range(len(order) + 1))
    assert curve[0]["bleu"] == result.bleu and curve[-1]["fraction"] == 1.0
    assert curve[1]["head"] == order[0].label
    everything = Measures(m, sample).bleu([order])[0]
    assert curve[-1]["bleu"] == pytest.approx(everything)


def test_a_large_model_s_pruning_curve_has_at_most_24_points_ending_at_every_head():
    assert hi.curve_points(24) == list(range(1, 25))  # the studio's model: every head
    points = hi.curve_points(144)  # opus-mt: 6 heads apart, the first and the last kept
    assert len(points) == 24 and points[0] == 1 and points[-1] == 144
    assert all(5 <= b - a <= 7 for a, b in zip(points, points[1:]))


def test_gradient_score_is_finite_non_negative_and_per_pair(val_model, monkeypatch):
    m, sample = val_model
    scores = Measures(m, sample).gradients()
    assert set(scores) == set(all_heads(m.cfg))
    values = list(scores.values())
    assert all(math.isfinite(v) and v >= 0 for v in values) and max(values) > 0
    monkeypatch.setattr(head_measures, "GRADIENT_ROWS", 1)  # one pair per backward pass
    one_by_one = Measures(m, sample).gradients()  # E_x |g(x)|, not |E_x g(x)|
    assert all(one_by_one[h] == pytest.approx(scores[h], rel=1e-4, abs=1e-7) for h in scores)
    assert all(p.grad is None for p in m.model.parameters())  # the model is not touched


def test_one_spearman_for_head_statistics_and_importance():
    """head_stats.spearman is the one rank correlation: average ranks for ties, as pandas."""
    import numpy as np
    import pandas as pd

    from core.attention.head_stats import spearman

    a = np.array([0.1, 0.5, 0.2, 0.9])
    assert spearman(a, a**3) == pytest.approx(1.0)
    assert spearman(a, -a) == pytest.approx(-1.0)
    assert np.isnan(spearman(a, np.ones(4)))
    x, y = np.array([1.0, 1.0, 2.0, 3.0, 5.0]), np.array([2.0, 1.0, 2.0, 4.0, 3.0])
    assert spearman(x, y) == pytest.approx(pd.Series(x).rank().corr(pd.Series(y).rank()))


def test_importance_is_cached_on_disk_and_reused(val_checkpoint, runs_root, monkeypatch):
    lm = StudioModel.load(val_checkpoint)
    first = hi.importance_for(lm, val_checkpoint, 5)
    assert not first.cached and list((runs_root / ".ablation").glob("*.json"))
    assert hi.lookup_importance(val_checkpoint, lm.meta, 5).heads == first.heads

    def never(*args, **kwargs):
        raise AssertionError("computed again")

    monkeypatch.setattr(hi, "head_importance", never)
    again = hi.importance_for(lm, val_checkpoint, 5)
    assert again.cached and again.heads == first.heads and again.pruning == first.pruning
    assert hi.lookup_importance(val_checkpoint, lm.meta, 4) is None  # another sample size
    with pytest.raises(AssertionError, match="computed again"):
        hi.importance_for(lm, val_checkpoint, 4)
    for damaged in ("{not json", '{"bleu": 1.0}', json.dumps({**first.__dict__, "heads": [1]})):
        next((runs_root / ".ablation").glob("*.json")).write_text(damaged)
        assert hi.lookup_importance(val_checkpoint, lm.meta, 5) is None
    ckpt = read_checkpoint(val_checkpoint)
    ckpt["state"] = {"step": 12345}  # another file content
    atomic_save(ckpt, val_checkpoint.parent / "changed.pt")
    assert hi.lookup_importance(val_checkpoint.parent / "changed.pt", lm.meta, 5) is None


def test_no_validation_split_is_a_clear_error(tiny_model):
    lm = tiny_model  # trained on all 30 pairs
    with pytest.raises(hi.DataError, match="without a validation split"):
        validation_sample(lm, trained_data(lm.meta), 10)


# ----------------------------------------------------------------------------- commands


def test_ablate_command_prints_a_baseline_then_one_line_per_head(val_checkpoint, capsys):
    assert ablate_cmd.main(["--checkpoint", str(val_checkpoint), "--sentences", "6"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    base, rows = lines[0], lines[1:]
    assert base["baseline"] is True and base["sentences"] == 6 and base["heads"] == len(rows)
    assert len(rows) == len(all_heads(load_checkpoint(val_checkpoint).model.cfg))
    assert all(set(r) >= HEAD_KEYS for r in rows)
    assert all(r["delta_bleu"] == pytest.approx(r["bleu"] - base["bleu"]) for r in rows)
    assert ablate_cmd.main(["--checkpoint", str(val_checkpoint), "--sentences", "6"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["cached"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sentences", "0"], "argument --sentences: must be a whole number from 1 to"),
        (["--data", "/nowhere/pairs.tsv"], "the file pairs.tsv is missing"),
    ],
)
def test_ablate_command_errors_are_one_line(val_checkpoint, capsys, args, message):
    assert ablate_cmd.main(["--checkpoint", str(val_checkpoint), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_ablate_command_without_a_validation_split(tiny_checkpoint, capsys):
    assert ablate_cmd.main(["--checkpoint", str(tiny_checkpoint)]) == 2
    assert "without a validation split" in capsys.readouterr().err


def test_translate_command_removes_heads(val_checkpoint, capsys):
    spec = "cross:0:0,cross:0:1,cross:0:2,cross:0:3,cross:1:0,cross:1:1"
    argv = ["--checkpoint", str(val_checkpoint), "--ablate", spec, "i'm home ."]
    assert translate_cmd.main(argv) == 0
    out = capsys.readouterr().out.strip()
    lm = StudioModel.load(val_checkpoint)
    with ablated(lm, parse_heads(spec)):
        expected = translate(lm.model, lm.src_vocab, lm.tgt_vocab, "i'm home .").text
    assert out == expected
    assert expected != translate(lm.model, lm.src_vocab, lm.tgt_vocab, "i'm home .").text


@pytest.mark.parametrize(
    "spec, message",
    [
        ("attn:0:0", "Unknown attention kind 'attn'"),
        ("cross:2:0", "cross:2:0: this model has 2 decoder layers"),
        ("encoder:0:4", "encoder:0:4: this model has 4 heads per layer"),
        ("cross:0", "'cross:0' is not KIND:LAYER:HEAD"),
        ("cross:one:0", "whole numbers"),
    ],
)
def test_translate_command_refuses_bad_heads(val_checkpoint, capsys, spec, message):
    argv = ["--checkpoint", str(val_checkpoint), "--ablate", spec, "i'm home ."]
    assert translate_cmd.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.startswith("error: ") and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_head_importance_says_why_it_has_more_pairs_than_sentences():
    """Issue 68, item 11: "10 validation sentences (17 pairs)" left the difference unsaid."""
    from core.figures.importance import baseline_words

    several = hi.HeadImportance(31.2, 1.234, 10, 17, [], [])
    words = baseline_words(several)
    assert "10 validation sentences" in words and "17" in words
    assert "several references" in words and "BLEU" in words
    one_each = baseline_words(hi.HeadImportance(31.2, 1.234, 10, 10, [], []))
    assert "pairs" not in one_each and "several" not in one_each


def test_the_help_names_the_sentences_default():
    from core.attention.importance import SENTENCES

    helped = " ".join(ablate_cmd.build_parser().format_help().split())
    assert f"the first N validation sentences (default: {SENTENCES})" in helped
