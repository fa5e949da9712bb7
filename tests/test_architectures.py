"""The table of architectures (``core/model/architectures.py``): every path of every row resolves
on its family's tiny model built with its real checkpoints' flags, the rows are the tiny models
tested (a new family is one row plus its tiny model), a ``model_type`` without a row is refused
in one line, and the lists of families elsewhere in ``core/model`` are read from the table."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from core.model import capabilities, hf_folder, hf_size
from core.model import hugging_face as hf
from core.model.architectures import (
    ARCHITECTURES,
    DECODER_ONLY,
    ENCODER_DECODER,
    MASKED,
    QUIRKS,
    RELATIVE,
    ROPE,
    UnknownArchitectureError,
    architecture_of,
    part,
)
from core.model.checkpoints import CheckpointError
from core.model.hf_folder import HFModelError
from core.model.opened import open_model
from core.runs.catalogue import list_models
from tests.hf_tiny import CONFORMANCE, MODEL_TYPES, TINY, save_tiny, tiny_config
from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES

ROOT = Path(__file__).resolve().parent.parent
NEW = tuple(f for f in TINY if f not in CONFORMANCE)  # tiny models only this file loads


def tiny_model_types() -> dict[str, str]:
    """{tiny model: its model_type} of every tiny model the suite builds."""
    names = (*TINY, *LM_FAMILIES, *ENCODER_FAMILIES)
    return {name: MODEL_TYPES.get(name, name) for name in names}


@pytest.fixture(scope="module")
def every_model(hf_models, hf_loaded, lm_loaded, tmp_path_factory) -> dict:
    """{tiny model: its adapter} of every tiny model: the suite's shared ones, and the
    encoder-decoders only this file reads (NLLB, mT5, UMT5) built and loaded here."""
    from core.model.hf_model import load

    root = tmp_path_factory.mktemp("architectures")
    extra = {name: load(save_tiny(root / name, name)) for name in NEW}
    shared = {name: hf_loaded[name] for name in CONFORMANCE}
    return shared | extra | dict(lm_loaded)


# ----------------------------------------------------------------------------- rows = models


def test_the_rows_are_the_families_of_the_tiny_models_tested():
    """A new family is one row plus its tiny model: a row without a tiny model, or a tiny
    model without a row, fails here."""
    assert set(ARCHITECTURES) == set(tiny_model_types().values())


def test_every_tiny_model_is_read_by_its_own_row(every_model):
    assert set(every_model) == set(tiny_model_types())
    for name, m in every_model.items():
        arch = architecture_of(m.model)
        assert arch.model_type == tiny_model_types()[name], name
        assert architecture_of(m.model.config.to_dict()) is arch
        kind = ENCODER_DECODER if m.model.config.is_encoder_decoder else None
        kind = kind or (MASKED if name in ENCODER_FAMILIES else DECODER_ONLY)
        assert arch.kind == kind, name


# ----------------------------------------------------------------------------- every path


def check_attention(arch, layer: nn.Module, attention, where: str) -> None:
    """Every path of one attention sub-layer resolves in ``layer``, and what it names is what
    the row says (projections, heads, scale, norm)."""
    module = part(layer, attention.path)
    names = arch.projections
    found = [part(module, n) for n in (names.q, names.k, names.v, names.fused, names.o) if n]
    assert all(isinstance(m, nn.Module) for m in found), where
    if attention.output:  # W_o outside the attention module (BERT)
        assert isinstance(part(layer, attention.output), nn.Linear), where
    if arch.heads:
        heads, width = (getattr(module, a) for a in arch.heads)
        assert isinstance(heads, int) and isinstance(width, int), where
    own = getattr(module, "scaling", None)  # BLOOM's and Falcon's: 1/√Dh, inv_norm_factor
    own = module.head_dim**-0.5 if own is None else own
    assert arch.scale_of(module) == pytest.approx(float(own)), where  # T5's own is 1.0 too
    norm = part(layer, attention.norm)
    assert isinstance(norm, nn.LayerNorm) == (arch.norm_class == "LayerNorm"), where
    if arch.norm_class == "RMSNorm":  # a gain, no bias
        assert norm.weight is not None and getattr(norm, "bias", None) is None, where
    where_, path = attention.resid_post
    assert where_ in ("output", "input") and isinstance(part(layer, path), nn.Module), where


def check_stack(arch, model: nn.Module, side: str, stack) -> None:
    """Every path of one stack resolves: its embeddings, positions, final norm, layers and,
    in each layer, its attentions and feed-forward."""
    module = part(model, stack.path)
    assert isinstance(part(module, stack.embed), nn.Embedding), side
    if stack.positions:
        assert isinstance(part(module, stack.positions), nn.Module), side
    if stack.final_norm:
        assert isinstance(part(module, stack.final_norm), nn.Module), side
    assert (stack.final_norm is not None) == (arch.norm == "pre"), side
    layers = part(module, arch.layers)
    assert len(layers) == 2, side  # every tiny model has two layers per stack
    for i, layer in enumerate(layers):
        check_attention(arch, layer, stack.self_attention, f"{side}.{i}.self")
        if stack.cross_attention:
            check_attention(arch, layer, stack.cross_attention, f"{side}.{i}.cross")
        assert all(isinstance(part(layer, p), nn.Module) for p in stack.mlp), side
        assert isinstance(part(layer, stack.mlp_norm), nn.Module), side


def test_every_path_of_every_row_resolves_on_its_tiny_model(every_model):
    for name, m in every_model.items():
        arch = architecture_of(m.model)
        expected = {"encoder", "decoder"} if arch.kind == ENCODER_DECODER else None
        expected = expected or ({"decoder"} if arch.kind == DECODER_ONLY else {"encoder"})
        assert set(arch.stacks) == expected, name
        for side, stack in arch.stacks.items():
            check_stack(arch, m.model, side, stack)
        assert isinstance(arch.output_head(m.model), nn.Module), name
        assert arch.quirks <= set(QUIRKS), name
        if arch.positions == ROPE:
            assert arch.stack().positions == "rotary_emb", name


def test_each_quirk_is_what_the_model_has(every_model):
    """The quirks the table names are the modules' and configs' own: a bias buffer after
    lm_head, a sliding window, language codes forced first, the output rescaled."""
    for name, m in every_model.items():
        arch, model = architecture_of(m.model), m.model
        has_bias = isinstance(getattr(model, "final_logits_bias", None), torch.Tensor)
        assert ("final_logits_bias" in arch.quirks) == has_bias, name
        if "sliding_window" in arch.quirks:
            assert hasattr(model.config, "sliding_window"), name
        if "multilingual" in arch.quirks:
            assert m.meta["language_codes"], name
        rescales = getattr(model.config, "scale_decoder_outputs", None) is not None
        assert "rescale_tied_output" not in arch.quirks or rescales, name
        for side, stack in arch.stacks.items():  # √D: in the embedding module, or after it
            embed = part(part(model, stack.path), stack.embed)
            inside = float(getattr(embed, "embed_scale", 1.0)) != 1.0
            assert ("embed_scale" in arch.quirks) == inside, (name, side)
            after = float(getattr(part(model, stack.path), "embed_scale", 1.0)) != 1.0
            assert ("decoder_embed_scale" in arch.quirks) == (after and not inside), (name, side)


@pytest.mark.parametrize("family", ["t5", "mt5", "umt5"])
def test_the_output_rescale_is_the_familys_own_when_tied(family):
    """T5 and UMT5 multiply the decoder's output by d^-1/2 before a tied lm_head; mT5 (in
    this transformers) does not: ``logits_of`` of the decoder's output is the model's own
    logits either way."""
    from transformers import AutoModelForSeq2SeqLM

    from core.model.hf_model import HFModel

    sizes = {"vocab_size": 40, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2}
    config = type(tiny_config(family, 40))(
        **sizes, num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    src, tgt = torch.tensor([[5, 6, 7, 1]]), torch.tensor([[0, 8, 9]])
    with torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=tgt)
        memory = out.encoder_last_hidden_state  # (1, S, D)
        hidden = model.get_decoder()(input_ids=tgt, encoder_hidden_states=memory)[0]
        logits = HFModel(model, None, None).logits_of(hidden)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=1e-5)
    held = sum(p.numel() for p in model.parameters())  # and its row's count, tied
    assert hf_size.counted_parameters(json.loads(config.to_json_string())) == held


def test_the_new_families_translate_and_their_lens_is_their_output(every_model):
    """NLLB (its fra_Latn code forced first), mT5 and UMT5, read by no other test: a
    translation carries every map, the lens of the last decoder layer is the model's own
    logits, (pre-LN) the stream after self-attention is what cross-attention reads, and
    the folder's count from its config is what loading holds."""
    from core.model.parts import DecodeSettings

    for name in NEW:
        m = every_model[name]
        code = m.language_code("fr")
        assert (code == "fra_Latn") == (name == "nllb"), name
        t = m.translate("i am cold", DecodeSettings(max_len=4, target_lang=code or ""))
        assert t.attention.cross.shape[-1] == len(t.src_tokens), name
        r = m.forced(m.source("i am cold").ids, [5, 6, m.eos_id])
        with torch.no_grad():
            lens = m.lens(r.decoder_outputs[-1])
        torch.testing.assert_close(lens, r.logits, atol=1e-5, rtol=1e-5)
        for own, cross in zip(r.attention["decoder_self"], r.attention["cross"]):
            torch.testing.assert_close(own.resid_post, cross.resid_pre)
        held = sum(p.numel() for p in m.model.parameters())
        assert m.meta["config_parameters"] == held, name


# ----------------------------------------------------------------------------- unknown types


def test_a_model_type_without_a_row_is_refused_in_one_line(hf_models, tmp_path):
    """An encoder-decoder of a family the table does not know (Pegasus here) is refused
    before anything is loaded, in one line naming the families it knows; where the getattr
    chains used to try it."""
    with pytest.raises(UnknownArchitectureError) as err:
        architecture_of({"model_type": "pegasus"})
    line = str(err.value)
    assert "\n" not in line and "pegasus" in line
    assert all(name in line for name in ARCHITECTURES)
    folder = shutil.copytree(hf_models["marian"], tmp_path / "pegasus")
    config = json.loads((folder / "config.json").read_text())
    config |= {"model_type": "pegasus", "architectures": ["PegasusForConditionalGeneration"]}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFModelError) as err:
        hf_folder.describe(folder)
    line = str(err.value)
    assert "\n" not in line and "this is a pegasus" in line
    assert "encoder-decoder models of the families marian, bart, mbart, m2m_100" in line
    with pytest.raises(CheckpointError, match="families marian") as err:
        open_model(str(folder))
    assert "\n" not in str(err.value)
    (entry,) = list_models(str(tmp_path), str(tmp_path / "runs"))
    assert not entry.usable and "this is a pegasus" in entry.reason


# ----------------------------------------------------------------------------- derived lists


def test_the_lists_of_families_are_read_from_the_table():
    rows = ARCHITECTURES.items()
    assert {n: r.positions for n, r in rows if r.kind == DECODER_ONLY} == hf_folder.LM_TYPES
    assert {n: r.positions for n, r in rows if r.kind == MASKED} == hf_folder.ENCODER_TYPES
    assert {n: hf_size.ARITHMETIC[r.count] for n, r in rows} == hf_size.COUNTS
    assert {n: dict(r.config_defaults) for n, r in rows} == hf_size.FAMILY_DEFAULTS
    assert set(hf.MULTILINGUAL) == {n for n, r in rows if "multilingual" in r.quirks}
    assert set(capabilities.BY_MODEL_TYPE) == {
        n for n, r in rows if r.positions == RELATIVE or r.refuses
    }


def family_literals(path: Path) -> list[str]:
    """``line: 'name'`` of each string constant in a module equal to a row's model_type
    (docstrings are not constants of the code, and are left out)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in ARCHITECTURES
        and id(node) not in docstrings
    ]


def test_no_module_but_the_table_and_the_counts_names_a_family():
    """Per-family knowledge lives in the table: no module of ``core`` or ``pages`` writes a
    family's model_type, but the table and ``hf_size``'s arithmetic (whose formulas are
    per family)."""
    allowed = {"core/model/architectures.py", "core/model/hf_size.py"}
    found = []
    for path in sorted([*(ROOT / "core").rglob("*.py"), *(ROOT / "pages").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative not in allowed:
            found += [f"{relative}:{hit}" for hit in family_literals(path)]
    assert found == []
