"""Hugging Face encoder-decoders behind the studio's one interface (core.model.hf_model's
HFModel, a TranslationModel), on tiny random Marian, BART, T5 and M2M100 models built offline
(tests/hf_tiny.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.corpus.bpe import join_pieces
from core.model import hf_folder
from core.model import hugging_face as hf
from core.model.checked_translation import translate_sentence
from core.model.checkpoints import CheckpointError, read_checkpoint
from core.model.hf_model import HFModel
from core.model.opened import open_model
from core.model.parts import DecodeSettings
from tests.hf_tiny import FAMILIES, LANGUAGES, save_tiny, tiny_config, word_tokenizer

SENTENCE = "the boy is tall ."
KINDS = ("encoder", "decoder_self", "cross")


def _target(family: str) -> str:
    return "__fr__" if family == "m2m_100" else ""


def test_a_multilingual_model_starts_with_the_chosen_language(hf_loaded):
    hm = hf_loaded["m2m_100"]
    assert hm.meta["language_codes"] == sorted(LANGUAGES)
    assert hm.language_codes() == sorted(LANGUAGES) and hm.language_code("fr") == "__fr__"
    for code in ("__fr__", "__de__"):
        t = hm.translate(SENTENCE, DecodeSettings(max_len=4, target_lang=code))
        assert t.output_tokens[0] == code
    with pytest.raises(ValueError, match="not a language code of this model"):
        hm.translate(SENTENCE, DecodeSettings(max_len=4, target_lang="xx_Zzzz"))


def test_description_reads_headers_only(hf_models, hf_loaded):
    info = hf_folder.describe(hf_models["marian"])
    assert (info["source_lang"], info["target_lang"]) == ("en", "fr")
    assert info["model_config"]["num_heads"] == 4
    assert info["model_config"]["num_encoder_layers"] == 2
    stored = sum(p.numel() for p in hf_loaded["t5"].model.parameters())
    assert hf_folder.describe(hf_models["t5"])["parameters"] == stored
    assert "en→fr" in hf_folder.size_label(info) and "2+2 layers" in hf_folder.size_label(info)


def test_tokens_follow_the_studio_convention():
    """SentencePiece-style ▁ word starts become ## continuations that join back into the
    words the tokenizer decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    text = ["the tallest boys are walking home", "walking boys talk", "tall homes"] * 5
    tk.train_from_iterator(text, trainers.BpeTrainer(vocab_size=40, special_tokens=["<unk>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")
    hm = HFModel(None, tokenizer, None, {"tokens": hf.tokenizer_kind(tokenizer)})
    assert hm.meta["tokens"] == "metaspace"
    ids = tokenizer("the tallest boys walking").input_ids
    shown = hm.source_tokens(ids)
    assert shown == hm.target_tokens(ids)  # one tokenizer both ways
    assert any(t.startswith("##") for t in shown)
    assert join_pieces(shown) == hm.target_words(ids) == ["the", "tallest", "boys", "walking"]


def test_the_page_translation_reads_a_hugging_face_model(hf_loaded):
    t = translate_sentence(hf_loaded["bart"], SENTENCE, DecodeSettings(max_len=5))
    assert t.attention.cross.shape[-1] == len(t.src_tokens)


# ----------------------------------------------------------------------------- bad input


def test_bad_model_folders_say_why_in_one_line(tmp_path, hf_models):
    from transformers import AlbertConfig, AlbertForMaskedLM, GPT2Config, GPT2LMHeadModel

    cases = []
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append(("has no config.json", empty))
    albert = tmp_path / "albert"  # an encoder-only family the studio does not map
    tiny = AlbertConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8,
                        intermediate_size=16, embedding_size=8, vocab_size=40)  # fmt: skip
    AlbertForMaskedLM(tiny).save_pretrained(albert)
    word_tokenizer().save_pretrained(albert)
    cases.append(("encoder-only models of the families bert, roberta, distilbert", albert))
    gpt = tmp_path / "gpt2"  # a decoder-only model opens; its tokenizer must fit it
    tiny = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=20)
    GPT2LMHeadModel(tiny).save_pretrained(gpt)
    word_tokenizer().save_pretrained(gpt)
    cases.append(("does not belong to this model", gpt))
    pickled = tmp_path / "pickled"
    save_tiny(pickled, "marian")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    cases.append(("no safetensors weights", pickled))
    alien = tmp_path / "alien"
    save_tiny(alien, "marian")
    config = json.loads((alien / "config.json").read_text())
    (alien / "config.json").write_text(json.dumps(config | {"auto_map": {"x": "y.Z"}}))
    cases.append(("remote code", alien))
    mismatched = tmp_path / "mismatched"
    save_tiny(mismatched, "marian")
    big = word_tokenizer(codes=[f"__x{i}__" for i in range(40)])
    big.save_pretrained(mismatched)
    cases.append(("does not belong to this model", mismatched))
    for needle, folder in cases:
        with pytest.raises(CheckpointError) as err:
            open_model(str(folder))
        assert needle in str(err.value) and "\n" not in str(err.value), err.value
        assert str(tmp_path) not in str(err.value)  # no server path shown
    with pytest.raises(CheckpointError, match="opens models of at most"):
        open_model(str(hf_models["marian"]), max_bytes=1000)


def one_tensor(folder):
    """A model folder whose weights keep one tensor of the model's (the rest left out)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    first = next(iter(weights))
    save_file({first: weights[first]}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_weights_that_do_not_cover_the_model_are_refused_never_made_random(tmp_path):
    """Issue 49, item 4: the size is the config's (counted from it by core.model.hf_size), and
    a folder whose weights leave tensors out is refused, not filled with random weights."""
    folder = one_tensor(save_tiny(tmp_path / "partial", "marian"))
    with pytest.raises(CheckpointError, match="weights do not cover the model") as err:
        open_model(str(folder))
    assert "\n" not in str(err.value) and str(tmp_path) not in str(err.value)
    config = json.loads((folder / "config.json").read_text())
    big = {"d_model": 1024, "encoder_layers": 24, "decoder_layers": 24}
    big |= {"encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096}
    (folder / "config.json").write_text(json.dumps(config | big))
    from core.model.hf_folder import describe

    assert describe(folder)["parameters"] < 10_000  # what the weight file claims
    with pytest.raises(CheckpointError, match="706 M parameters"):  # what the config holds
        open_model(str(folder), max_bytes=640 * 2**20)


@pytest.mark.parametrize(
    "damage, needle",
    [(b"", "empty or cut short"), (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "not a safetensors")],
)
def test_a_damaged_weights_file_is_one_line_and_one_unusable_entry(tmp_path, damage, needle):
    """Issue 49, item 5: an empty model.safetensors (as during a copy) or a header that is a
    list: the folder is listed as unusable with its reason, the others as they are."""
    from core.runs.catalogue import list_models

    ck = tmp_path / "checkpoints"
    save_tiny(ck / "good", "marian")
    save_tiny(ck / "broken", "marian")
    (ck / "broken" / "model.safetensors").write_bytes(damage)
    with pytest.raises(CheckpointError, match=needle):
        open_model(str(ck / "broken"))
    entries = {Path(e.path).name: e for e in list_models(str(ck), str(tmp_path / "runs"))}
    assert entries["good"].usable
    assert not entries["broken"].usable and needle in entries["broken"].reason
    assert str(tmp_path) not in entries["broken"].reason


def test_a_hub_id_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="offline"):
        open_model("Helsinki-NLP/opus-mt-en-fr", hub=True)
    with pytest.raises(CheckpointError, match="No such file"):
        open_model("Helsinki-NLP/opus-mt-en-fr")  # not a hub id unless the caller allows it


def test_a_studio_command_names_a_model_folder(hf_models):
    with pytest.raises(CheckpointError, match="Hugging Face model folder"):
        read_checkpoint(hf_models["t5"])


def test_tiny_configs_are_encoder_decoders():
    for family in FAMILIES:
        assert tiny_config(family, 50).is_encoder_decoder


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lens_names_what_the_model_applies_after_its_last_layer(hf_loaded, family):
    """The lens goes through what the model applies after its last layer (final norm of a
    pre-LN family, T5's rescaling, lm_head, final_logits_bias) and says which; greedy's word
    is its top word. (That the last layer's lens is the model's own output, for every family:
    tests/test_conformance.py.)"""
    from core.attention.logit_lens import logit_lens

    hm = hf_loaded[family]
    settings = DecodeSettings(max_len=6, target_lang=_target(family))
    t = hm.translate(SENTENCE, settings)
    shown = logit_lens(hm, t)
    if family in ("bart", "t5"):  # greedy: the top word is chosen (Marian bans <pad>, M2M100
        free = len(t.out_ids)  # forces __fr__); BART's config forces its forced_eos_token_id
        if family == "bart" and free == settings.max_len:  # at the last step of max_len
            assert t.out_ids[-1] == hm.model.generation_config.forced_eos_token_id
            free -= 1
        assert free > 0 and (shown.chosen_rank[-1, :free] == 0).all()
    assert "lm_head" in shown.projected
    assert ("final norm" in shown.projected) == (family in ("t5", "m2m_100"))


def test_the_inside_head_command_reads_a_model_folder(hf_models, capsys):
    from core.inside_head import main

    assert main(["--checkpoint", str(hf_models["t5"]), "--sentence", SENTENCE, "--logit-lens"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and len(rows[0]["layers"]) == 2
    assert main(["--checkpoint", str(hf_models["t5"]), "--sentence", SENTENCE]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["score"] == "q·k (no 1/√d) + position bias" and len(view["bias"]) == 6


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", ["attention", "rollout", "grad-input", "integrated-gradients"])
def test_attribution_rows_are_distributions(hf_loaded, family, method):
    from core.attribution.methods import AttributionError, attribute

    hm = hf_loaded[family]
    settings = DecodeSettings(max_len=5, target_lang=_target(family))
    t = hm.translate(SENTENCE, settings)
    if family == "t5" and method == "integrated-gradients":  # degenerate: refused, one line
        with pytest.raises(AttributionError, match="does not converge for T5"):
            attribute(hm, t.src_ids, t.out_ids, method)
        return
    a = attribute(hm, t.src_ids, t.out_ids, method)
    assert a.contributions.shape == (len(t.out_ids), len(t.src_ids) + len(t.out_ids))
    assert (a.contributions >= 0).all()
    assert abs(a.contributions.sum(1) - 1).max() < 1e-5
    T, S = len(t.out_ids), len(t.src_ids)
    prefix = a.contributions[:, S:]
    assert (prefix[np.triu_indices(T, 1)] == 0).all()  # no output token reads a later one
    if method == "integrated-gradients":
        assert a.completeness < 0.05  # completeness within 5 %


def test_gradient_x_input_equals_captums_on_the_same_embeddings(hf_loaded):
    from captum.attr import InputXGradient

    from core.attribution.gradients import embedding_task
    from core.attribution.methods import attribute

    hm = hf_loaded["marian"]
    t = hm.translate(SENTENCE, DecodeSettings(max_len=4))
    job = embedding_task(hm, hm.forced(t.src_ids, t.out_ids))
    T = len(t.out_ids)
    inputs = tuple(x.detach().expand(T, -1, -1).clone().requires_grad_() for x in job.embeddings)
    parts = InputXGradient(job.log_probs).attribute(inputs, target=list(range(T)))
    expected = torch.cat([p.sum(-1) for p in parts], dim=1)  # (T, S + T)
    S = len(t.src_ids)
    expected[:, S:] = expected[:, S:] * torch.ones(T, T).tril()
    got = attribute(hm, t.src_ids, t.out_ids, "grad-input").raw
    np.testing.assert_allclose(got, expected.detach().numpy(), atol=1e-6)


def test_integrated_gradients_on_t5_says_why_not_in_one_line(hf_loaded):
    from core.attribution.methods import AttributionError, attribute

    t = hf_loaded["t5"].translate(SENTENCE, DecodeSettings(max_len=3))
    with pytest.raises(AttributionError, match="does not converge for T5") as err:
        attribute(hf_loaded["t5"], t.src_ids, t.out_ids, "integrated-gradients")
    assert "\n" not in str(err.value)


def test_the_attribute_command_reads_a_model_folder(hf_models, capsys):
    from core.attribute import main

    folder = str(hf_models["bart"])
    assert main(["--checkpoint", folder, "--method", "rollout", SENTENCE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "rollout" and out["source"][-1] == "</s>"
    assert main(["--checkpoint", folder, "--method", "alti", SENTENCE]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "alti"


def test_feeding_the_models_own_output_gives_its_own_maps(hf_loaded):
    """Playback's reference: the model's own translation, fed back through the tokenizer's
    target side, gives the maps of the translation itself."""
    from core.attention.maps import teacher_forced_maps

    hm = hf_loaded["marian"]
    t = hm.translate(SENTENCE, DecodeSettings(max_len=6))
    assert t.out_ids[-1] == hm.model.config.eos_token_id
    forced = teacher_forced_maps(hm, SENTENCE, t.text)
    assert forced.output_tokens == t.output_tokens and forced.decoder_inputs == t.decoder_inputs
    for kind in KINDS:
        np.testing.assert_allclose(getattr(forced, kind), getattr(t.attention, kind), atol=1e-6)
    with pytest.raises(ValueError, match="reference is empty"):
        teacher_forced_maps(hm, SENTENCE, "  ")
    assert hm.unknown_target_words("je suis zzz") == ["zzz"]


def test_a_forced_pass_builds_no_cache(hf_loaded, monkeypatch):
    """A teacher-forced pass reads every step at once: it builds no key/value cache (building
    one was a quarter of a tiny model's pass, the file mode's per-line cost)."""
    from transformers import cache_utils

    built = []
    make = cache_utils.DynamicCache.__init__
    monkeypatch.setattr(
        cache_utils.DynamicCache,
        "__init__",
        lambda self, *a, **kw: built.append(1) or make(self, *a, **kw),
    )
    hm = hf_loaded["marian"]
    t = hm.force(SENTENCE, "je suis froid", DecodeSettings())
    assert t.out_ids and not built


def test_opus_mt_layout_with_its_sentencepiece_tokenizer(hf_loaded):
    """MarianTokenizer over a SentencePiece model (source.spm, target.spm, vocab.json), as
    Helsinki-NLP's folders hold it: languages read, pieces shown with ## and joined back into
    the decoded words, a reference fed through the target side."""
    from core.attention.maps import teacher_forced_maps

    hm = hf_loaded["marian-spm"]
    assert type(hm.tokenizer).__name__ == "MarianTokenizer"
    assert hm.meta["tokens"] == "metaspace" and hm.languages == ("en", "fr")
    t = hm.translate("the boy is tall .", DecodeSettings(max_len=8))
    words = join_pieces(t.src_tokens[:-1])
    assert words == ["the", "boy", "is", "tall", "."]  # a bare ▁ piece: ␣, its own start
    assert any(tok.startswith("##") for tok in t.src_tokens)
    forced = teacher_forced_maps(hm, "the boy is tall .", "le garçon est grand .")
    assert forced.output_tokens[-1] == "</s>" and forced.cross.shape[-1] == len(t.src_tokens)


@pytest.mark.parametrize("family", [*FAMILIES, "marian-spm"])
def test_gold_pairs_are_read_over_the_models_own_pieces(hf_loaded, family):
    """Each gold word is cut into the model's pieces; the kept block of the cross-attention
    is the pass's own (specials before the pieces left out), one row and column per piece
    plus </s>."""
    from core.alignment.extract import pair_maps

    hm = hf_loaded[family]
    src, tgt = ["the", "boy", "is", "tall", "."], ["le", "garçon", "est", "grand", "."]
    [maps] = pair_maps(hm, [(src, tgt)])
    cross, src_words, tgt_words = maps.cross, maps.src_words, maps.tgt_words
    s_ids, _ = hm.word_pieces(src, target=False)
    t_ids, _ = hm.word_pieces(tgt, target=True)
    assert cross.shape == (2, 4, len(t_ids) + 1, len(s_ids) + 1)
    assert sorted(set(src_words)) == list(range(5)) and sorted(set(tgt_words)) == list(range(5))
    s_pre, s_post = hm.framing(src, target=False)
    t_pre, _ = hm.framing(tgt, target=True)
    if family == "m2m_100":  # forced to French first, as the model translates
        t_pre = [hm.tokenizer.convert_tokens_to_ids("__fr__"), *t_pre]
    eos = hm.model.config.eos_token_id
    source, dec = hf.forced_inputs(hm, s_pre + s_ids + s_post, t_pre + t_ids + [eos])
    _, maps = hf.forced_pass(hm, source, dec)
    whole = maps.cross[:, 0].numpy()
    block = whole[:, :, len(t_pre) : len(t_pre) + len(t_ids) + 1]
    np.testing.assert_allclose(cross, block[..., len(s_pre) : len(s_pre) + len(s_ids) + 1])


def test_every_reader_is_scored_on_a_gold_set(hf_loaded):
    from core.alignment.gold import GoldLinks
    from core.alignment.grid import alignment_grid

    pairs = [(["the", "boy", "is", "tall", "."], ["le", "garçon", "est", "grand", "."])] * 2
    gold = [GoldLinks({(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)})] * 2
    grid = alignment_grid(hf_loaded["t5"], pairs, gold)
    assert len(grid.rows) == 2 * (2 * (4 + 1) + 1)  # modes x (layers x (heads + mean) + all)
    assert all(0.0 <= row.aer <= 1.0 for row in grid.rows)


def test_a_translations_links_leave_out_leading_specials(hf_loaded):
    from core.alignment.extract import Reader, alignable, from_sentence, links
    from core.attention.sentence_maps import SentenceMaps

    hm = hf_loaded["m2m_100"]
    settings = DecodeSettings(max_len=5, target_lang="__fr__")
    t = hm.translate(SENTENCE, settings)
    maps = alignable(SentenceMaps.from_translation(t))
    assert maps.output_tokens[0] != "__fr__" and maps.cross.shape[2] == len(t.out_ids) - 1
    pair = from_sentence(maps.cross, maps.src_tokens, maps.output_tokens)
    found = links(pair, Reader(1, 0, "awo"))
    assert all(0 <= s < 5 and t_ >= 0 for s, t_ in found)


def test_the_align_command_reads_a_model_folder(hf_models, tmp_path, capsys):
    from core.align import main

    pairs = tmp_path / "pairs.txt"
    pairs.write_text(
        "the boy is tall . ||| le garçon est grand .\ni am cold . ||| je suis froid .\n"
    )
    assert main(["--checkpoint", str(hf_models["marian-spm"]), "--data", str(pairs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, (n_src, n_tgt) in zip(lines, [(5, 5), (4, 4)]):
        found = [tuple(map(int, link.split("-"))) for link in line.split()]
        assert found and all(0 <= s < n_src and 0 <= t < n_tgt for s, t in found)


def test_model_folders_behind_links_and_huge_tokenizers_are_not_opened(tmp_path):
    """Issue 49, item 9: a symbolic link under checkpoints/ is not followed when the models
    are listed; a tokenizer file past TOKENIZER_BYTES is refused in one line."""
    from core.model.hf_folder import TOKENIZER_BYTES, describe
    from core.model.hf_folder import HFModelError as FolderError
    from core.runs.catalogue import model_folders

    ck, elsewhere = tmp_path / "checkpoints", tmp_path / "elsewhere"
    ck.mkdir()
    save_tiny(ck / "here", "marian")
    save_tiny(elsewhere / "there", "marian")
    (ck / "linked").symlink_to(elsewhere / "there", target_is_directory=True)
    (ck / "deeper").symlink_to(elsewhere, target_is_directory=True)
    assert [p.name for p in model_folders(ck)] == ["here"]
    with open(ck / "here" / "tokenizer.json", "r+b") as f:
        f.truncate(TOKENIZER_BYTES + 1)  # sparse: no real megabytes written
    with pytest.raises(FolderError, match="tokenizer file of more than"):
        describe(ck / "here")


def test_the_docs_capability_table_is_the_capability_table():
    """docs/hugging-face.md shows the one table every refusal comes from, as
    ``core.model.capabilities.table`` prints it: a refusal added or lifted changes both."""
    from pathlib import Path

    from core.model.capabilities import table

    text = (Path(__file__).resolve().parent.parent / "docs" / "hugging-face.md").read_text()
    start = "<!-- capabilities: generated by core.model.capabilities.table() -->\n"
    shown = text[text.index(start) + len(start) : text.index("<!-- end of capabilities -->")]
    assert shown == table()


def test_the_readmes_families_table_is_the_capability_table():
    """Issue 65 P8: the README shows each family's sections as
    ``core.model.capabilities.families_table`` prints them from the one table every refusal
    comes from (a row changed there changes the README), under the Attention page's own labels."""
    from pathlib import Path

    from core.model.capabilities import SECTION_WORDS, families_table
    from pages.ui.attention.sections import SECTIONS

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = "<!-- families: generated by core.model.capabilities.families_table() -->\n"
    shown = text[text.index(start) + len(start) : text.index("<!-- end of families -->")]
    assert shown == families_table()
    elsewhere = {"translate", "head_roles"}  # the Translate page; the Maps' roles panel
    for what, label in SECTION_WORDS:
        assert SECTIONS[what].label == label if what in SECTIONS else what in elsewhere, what
    assert "| masked language model | — | ✓ |" in shown  # it does not translate; its Maps show
