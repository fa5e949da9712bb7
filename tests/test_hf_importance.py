"""Head importance of a Hugging Face encoder-decoder (core.attention.head_measures'
Measures through the one interface): each row's own gates give what removing its heads by
hand gives, the gradient score is the derivative it claims, and the page and command show the
grids for a model folder."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from core import ablate
from core.attention.ablation import HeadSpec
from core.attention.head_measures import Measures, resolved_precision
from core.attention.importance import importance_for, lookup_importance
from core.corpus.splits import Split
from core.corpus.text import tokenize
from core.measure.sample import sample_of
from core.model import interface, sites
from core.model.batched import MAX_DECODE_ROWS, decode_rows, token_losses
from core.model.config import ModelConfig
from core.model.hf_base import as_text
from core.model.hf_model import HFModel, load
from core.model.studio_model import StudioModel
from pages.ui.attention.ablation_view import PRECISION_LABELS
from tests import helpers
from tests.helpers import assert_clean, run_page_script
from tests.hf_tiny import FAMILIES

SETS = [
    [],
    [HeadSpec("encoder", 0, 1)],
    [HeadSpec("cross", 1, 0), HeadSpec("decoder_self", 0, 3)],
    [HeadSpec("cross", 0, h) for h in range(4)] + [HeadSpec("encoder", 1, 2)],
]


def _target(family: str) -> str | None:
    return "__fr__" if family == "m2m_100" else None


def removed_by_hand(hm, heads) -> torch.nn.Module:
    """A copy of the model whose output projections ignore ``heads``: their columns of W_o
    zeroed (run as a plain forward, no hook site involved)."""
    model = copy.deepcopy(hm.model)
    with torch.no_grad():
        for h in heads:
            module = sites.attention_modules(model, h.kind)[h.layer]
            _, width = sites.head_geometry(module)
            sites.projections(module)[3].weight[:, h.head * width : (h.head + 1) * width] = 0.0
    return model


def test_d2l_words_are_given_to_a_tokenizer_as_text():
    assert as_text(["i'm", "home", "."]) == "I'm home."
    assert as_text(["what", ",", "you", "?"]) == "What, you?"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_rows_gates_give_the_loss_of_removing_its_heads_by_hand(hf_loaded, family):
    hm = hf_loaded[family]
    sample = sample_of(hm, Split(helpers.word_pairs()), 16, _target(family))
    batched = Measures(hm, sample, _target(family)).losses(SETS)
    start = hm.model.config.decoder_start_token_id
    for heads, got in zip(SETS, batched):
        total, count = 0.0, 0
        model = removed_by_hand(hm, heads)
        for src, tgt in sample.encoded:  # one pair at a time: no padding
            logits = (
                model(  # (T, V)
                    input_ids=torch.tensor([src]),
                    decoder_input_ids=torch.tensor([[start, *tgt[:-1]]]),
                )
                .logits[0]
                .detach()
            )
            total += float(F.cross_entropy(logits.float(), torch.tensor(tgt), reduction="sum"))
            count += len(tgt)
        assert got == pytest.approx(total / count, abs=1e-5)
    assert len(set(round(x, 6) for x in batched)) > 1  # the sets do change the loss


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_greedy_outputs_equal_generate_one_sentence_at_a_time(
    hf_loaded, family, monkeypatch
):
    monkeypatch.setattr(interface, "MAX_LEN", 6)  # every batch: the same output length (the
    # door's max_output, which HFModel derives)
    hm = hf_loaded[family]
    target = _target(family)
    sample = sample_of(hm, Split(helpers.word_pairs()), 16, target)
    measures = Measures(hm, sample, target)
    batched = measures.output_ids(SETS)
    extra = {"forced_bos_token_id": hm.tokenizer.convert_tokens_to_ids(target)} if target else {}
    eos = hm.model.config.eos_token_id
    for heads, outputs in zip(SETS, batched):
        model = removed_by_hand(hm, heads)
        for src, ids in zip(sample.src_ids, outputs):
            out = model.generate(
                input_ids=torch.tensor([src]), do_sample=False, max_new_tokens=6, **extra
            )[0, 1:].tolist()  # without the start token
            assert ids[: len(out)] == out  # up to its </s>: padding after it in a batch
            assert len(ids) == len(out) or out[-1] == eos
            text = hm.tokenizer.decode(out, skip_special_tokens=True)
            assert hm.scored_words(ids) == tokenize(text)


def rms_norm_in_its_own_dtype(self, x: torch.Tensor) -> torch.Tensor:
    """T5LayerNorm's forward with its variance taken in x's dtype (transformers takes it in
    float32 whatever x is: a float64 model's loss would keep float32 noise)."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_the_gradient_score_is_the_derivative_of_the_loss_at_the_gate(
    hf_models, family, monkeypatch
):
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    monkeypatch.setattr(T5LayerNorm, "forward", rms_norm_in_its_own_dtype)
    hm = load(hf_models[family])  # a model of its own: the shared one is never changed
    hm.model.double()  # a central difference of a float32 loss is noise at these slopes
    sample = sample_of(hm, Split(helpers.word_pairs(1)), 1)
    measures = Measures(hm, sample)
    scores = measures.gradients()
    assert len(scores) == len(measures.all_heads()) == 3 * 2 * 4
    src, tgt = sample.encoded[0]
    eps = 1e-5  # float64 throughout; at 1e-3 the tiny T5's gate crosses a ReLU's kink

    def loss(head: HeadSpec, gate: float) -> float:
        gates = {(head.kind, head.layer): torch.ones(1, 4, dtype=torch.float64)}
        gates[(head.kind, head.layer)][0, head.head] = gate
        with torch.no_grad(), hm.rows_gated(gates):
            tokens = token_losses(hm, [(src, tgt)])  # (1, T)
        return float(tokens.sum()) / len(tgt)

    for head in [
        HeadSpec("encoder", 0, 1),
        HeadSpec("cross", 1, 2),
        HeadSpec("decoder_self", 1, 0),
    ]:
        slope = (loss(head, 1 + eps) - loss(head, 1 - eps)) / (2 * eps)
        assert scores[head] == pytest.approx(abs(slope), rel=1e-3, abs=1e-8)


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_bfloat16_passes_measure_what_float32_measures(hf_loaded, family):
    hm = hf_loaded[family]
    sample = sample_of(hm, Split(helpers.word_pairs()), 16)
    exact, fast = Measures(hm, sample), Measures(hm, sample, precision="bfloat16")
    assert (exact.precision, fast.precision) == ("float32", "bfloat16")
    losses, quick = exact.losses(SETS), fast.losses(SETS)
    assert quick != losses  # the passes did run in bfloat16
    assert quick == pytest.approx(losses, abs=0.02)
    changes = [x - losses[0] for x in losses[1:]]
    assert [x - quick[0] for x in quick[1:]] == pytest.approx(changes, abs=0.02)
    words = [
        [[hm.scored_words(ids) for ids in rows] for rows in m.output_ids(SETS)]
        for m in (exact, fast)
    ]
    agree = [a == b for x, y in zip(*words) for a, b in zip(x, y)]
    assert sum(agree) >= 0.75 * len(agree)  # random weights: near ties flip a few
    assert fast.gradients() == exact.gradients()  # the gradient score stays float32


def test_auto_precision_is_bfloat16_only_where_the_cpu_runs_it_natively(hf_loaded, monkeypatch):
    hm = hf_loaded["marian"]  # on the CPU
    studio = StudioModel(*helpers.random_model())  # measured exactly: always float32
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert resolved_precision("auto", hm) == "bfloat16"
    assert resolved_precision("float32", hm) == "float32"
    assert resolved_precision("bfloat16", hm) == "bfloat16"
    assert resolved_precision("auto", studio) == resolved_precision("bfloat16", studio) == "float32"
    with monkeypatch.context() as on_gpu:
        on_gpu.setattr(HFModel, "device", property(lambda self: torch.device("cuda")))
        assert resolved_precision("auto", hm) == "float32"
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolved_precision("auto", hm) == "float32"
    with pytest.raises(ValueError, match="precision must be one of"):
        resolved_precision("float16", hm)


def model_folder(hf_models, tmp_path, monkeypatch, family: str):
    """A copy of a tiny model's folder, with a fra-eng stand-in and the app's folders in
    ``tmp_path``."""
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return shutil.copytree(hf_models[family], tmp_path / family)


def test_importance_of_a_model_folder_is_measured_cached_and_printed(
    hf_models, hf_loaded, tmp_path, monkeypatch, capsys
):
    folder = model_folder(hf_models, tmp_path, monkeypatch, "marian")
    meta, seen = hf_loaded["marian"].meta, []
    result = importance_for(hf_loaded["marian"], folder, 5, progress=lambda f, w: seen.append(f))
    assert (result.sentences, len(result.heads), result.pruning[-1]["removed"]) == (5, 24, 24)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
    auto = resolved_precision("auto", hf_loaded["marian"])
    assert result.precision == auto
    assert lookup_importance(folder, meta, 5, precision=auto).heads == result.heads
    assert ablate.main(["--checkpoint", str(folder), "--sentences", "5"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["baseline"] and lines[0]["cached"] and len(lines) == 25
    assert lines[0]["precision"] == auto and lines[1:] == result.heads
    command = ["--checkpoint", str(folder), "--sentences", "5", "--precision", "float32"]
    assert ablate.main(command) == 0  # another precision: measured anew, cached apart
    exact = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert exact[0]["precision"] == "float32" and exact[0]["cached"] == (auto == "float32")
    assert lookup_importance(folder, meta, 5, precision="float32").heads == exact[1:]
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert lookup_importance(folder, meta, 5, precision=auto) is None  # other files


def test_the_page_computes_head_importance_for_a_model_folder(
    studio_dirs, hf_models, tmp_path, monkeypatch
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    shutil.copytree(hf_models["marian"], studio_dirs["checkpoints"] / "marian")
    query = {"model": "checkpoints/marian/", "sentence": "the boy is tall .", "section": "ablation"}
    at = run_page_script("attention.py", query)
    assert set(at.selectbox(key="ab_precision").options) == {
        PRECISION_LABELS["float32"],
        PRECISION_LABELS["bfloat16"],
    }
    at.number_input(key="ab_sentences").set_value(4)
    at.selectbox(key="ab_precision").set_value("bfloat16")
    at.button(key="ab_compute").click().run()
    assert_clean(at)
    shown = " ".join(m.value for m in at.markdown)
    assert "on 4 validation sentences" in shown and " in bfloat16." in shown
    assert at.button(key="ab_remove")  # the least important heads can be removed
    assert not at.info or all("not built" not in i.value for i in at.info)
    at.selectbox(key="ab_precision").set_value("float32").run()
    assert at.button(key="ab_compute")  # float32 is another result: not computed yet


def test_the_evaluate_command_scores_a_model_folder_on_the_studios_split(
    hf_models, hf_loaded, tmp_path, monkeypatch, capsys
):
    from core import evaluate
    from core.corpus.config import DataConfig
    from core.corpus.splits import load_splits

    folder = model_folder(hf_models, tmp_path, monkeypatch, "marian")
    assert evaluate.main(["--checkpoint", str(folder), "--split", "val"]) == 0
    out = json.loads(capsys.readouterr().out)
    split = load_splits(DataConfig()).val  # the same sentences as the studio's own models'
    measures = Measures(hf_loaded["marian"], sample_of(hf_loaded["marian"], split, 99))
    assert out["sentences"] == len(split.groups()) and out["split"] == "val"
    assert out["loss"] == pytest.approx(measures.losses([[]])[0], abs=1e-6)
    assert out["bleu"] == pytest.approx(measures.bleu([[]])[0])
    assert 0 <= out["unk_share"] <= 1 and out["sentences_per_s"] > 0


def test_decode_rows_shrink_with_the_model():
    """One sizing rule for every greedy pass: 96 rows at opus-mt's size (d_model 512, 6 + 6
    layers, measured in bench/hf_server_memory.py), the cap for a model a tenth of that."""

    def sized(width: int, layers: int) -> ModelConfig:
        return ModelConfig(100, 100, width, 8, layers, layers)

    assert decode_rows(sized(512, 6)) == 96  # opus-mt
    assert decode_rows(sized(32, 2)) == MAX_DECODE_ROWS
    big, opus = sized(1024, 24), sized(512, 6)
    assert 1 <= decode_rows(big) < decode_rows(opus)
