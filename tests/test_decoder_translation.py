"""Issue 66: a decoder-only model trained on translation by prompting (``source <eos> <bos>``
then the target): the settings allow it, the trainee decodes greedily and in batches (BLEU at
evaluations, probe maps as three blocks), its ``save_pretrained`` folder reads text as training
did and opens through the door in the layout it was trained in, and ``core.evaluate`` splits
its corpus as the run did."""

from __future__ import annotations

import json

import pytest
import torch

from core.corpus.config import DataConfig
from core.corpus.splits import load_splits, vocabularies
from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model.config import ModelConfig
from core.model.trainee import build_model
from core.training.settings import validate_settings
from tests.helpers import TINY, TINY_ARGS

TINY_DECODER = {  # a decoder-only model of the tiny size
    "arch": "decoder-only",
    "d_model": 32,
    "num_heads": 4,
    "num_kv_heads": 2,
    "num_decoder_layers": 2,
    "d_ff": 64,
    "dropout": 0.0,
}
EDGES = [
    "I'm home.",
    "3.5 km",
    "Wait...",
    "?a",
    "a?b",
    "Hello , world!",
    "Ça va ?",
    "x\u202fy\xa0z!",
]


def tiny_corpus():
    """The tiny corpus with one vocabulary of both languages (as a decoder-only run reads it)."""
    cfg = DataConfig(source=str(TINY), split="head", min_freq=1, shared_vocab=True)
    return vocabularies(load_splits(cfg), cfg)


def random_trainee(vocab: Vocab):
    """An untrained decoder-only trainee over ``vocab`` (seeded), in eval mode."""
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), **TINY_DECODER)
    return build_model(cfg).eval()


def stepwise_greedy(trainee, src_ids: list[int], steps: int) -> list[int]:
    """Greedy ids after ``src <bos>``, one whole uncached pass per step (the reference)."""
    row, out = [*src_ids, Vocab.bos_id], []
    with torch.no_grad():
        for _ in range(steps):
            out.append(int(trainee.lm(input_ids=torch.tensor([row + out])).logits[0, -1].argmax()))
            if out[-1] == Vocab.eos_id:
                break
    return out


def through_eos(ids: list[int]) -> list[int]:
    """Ids up to and including the first <eos>."""
    return ids[: ids.index(Vocab.eos_id) + 1] if Vocab.eos_id in ids else ids


# ----------------------------------------------------------------------------- settings


def test_a_decoder_only_model_may_train_on_translation():
    """Before issue 66's translation by prompting: 'translation by prompting comes later'."""
    assert validate_settings("small", {"model": {"arch": "decoder-only"}}) == []


def test_a_decoder_only_translation_must_fit_source_and_target_in_its_positions():
    problems = validate_settings(
        "small", {"model": {"arch": "decoder-only", "max_positions": 20}, "data": {"max_len": 12}}
    )
    assert problems == ["2 x max_len (12) + 2 must fit in the model's max_positions (20)"]


def test_the_decoder_preset_is_a_decoder_only_model_near_the_small_presets_budget():
    from core.training.presets import PRESET_LABELS, PRESETS

    assert validate_settings("decoder", any_source=True) == []
    model = PRESETS["decoder"]["model"]
    assert model["arch"] == "decoder-only" and "decoder" in PRESET_LABELS
    trainee = build_model(ModelConfig(6000, 6000, **model))
    assert 6.5e6 < trainee.num_parameters() < 8.3e6  # "small": 8.3 M


# ----------------------------------------------------------------------------- decoding


def test_the_trainee_decodes_in_batches_as_one_sentence_at_a_time():
    """Left-padded prompts, a key/value cache: each row's ids equal uncached greedy decoding."""
    from core.model.decode import translate_batch

    corpus = tiny_corpus()
    vocab = corpus.src_vocab
    trainee = random_trainee(vocab)
    sentences = [s for s, _ in corpus.train.pairs[:6]]  # of different lengths
    rows = [vocab.encode(s) + [Vocab.eos_id] for s in sentences]
    width = max(map(len, rows))
    src = torch.tensor([r + [Vocab.pad_id] * (width - len(r)) for r in rows])  # (B, S)
    out = trainee.greedy_decode(src, 8)  # (B, T)
    for row, ids in zip(rows, out.tolist()):
        assert through_eos(ids) == stepwise_greedy(trainee, row, 8)
    words = translate_batch(trainee, vocab, vocab, sentences, max_len=8)
    assert words == [
        vocab.words([t for t in vocab.decode(through_eos(ids)) if t != "<eos>"])
        for ids in out.tolist()
    ]


def test_the_trainee_translates_one_sentence_with_its_three_blocks():
    """The probe maps of a decoder-only run: the source over itself, the decoder inputs over
    themselves and over the source, cut from one pass over prompt and output."""
    from core.model.decode import translate

    corpus = tiny_corpus()
    trainee = random_trainee(corpus.src_vocab)
    t = translate(trainee, corpus.src_vocab, corpus.tgt_vocab, "I'm home.", max_len=6)
    S, T, L = len(t.src_tokens), len(t.output_tokens), TINY_DECODER["num_decoder_layers"]
    assert t.src_tokens == ["i'm", "home", ".", "<eos>"] and t.decoder_inputs[0] == "<bos>"
    maps = t.attention
    assert maps.encoder.shape == (L, 4, S, S) and maps.decoder_self.shape == (L, 4, T, T)
    assert maps.cross.shape == (L, 4, T, S)
    assert torch.all(maps.encoder.triu(1) == 0)  # causal: a source token reads no later one
    whole = maps.cross.sum(-1) + maps.decoder_self.sum(-1)  # a decoder input reads nothing else
    assert torch.allclose(whole, torch.ones_like(whole), atol=1e-5)


# ----------------------------------------------------------------------------- the folder


def test_the_folder_tokenizer_reads_text_as_training_did():
    """The folder's tokenizer cuts raw text into the words ``tokenize`` gives (d2l's
    preprocessing), so a tool that reads the folder feeds the model what it was trained on."""
    from core.corpus.text import tokenizers_preprocessing

    normalizer, words = tokenizers_preprocessing()
    texts = EDGES + [
        side for line in TINY.read_text("utf-8").splitlines() for side in line.split("\t")
    ]
    for text in texts:
        cut = [w for w, _ in words.pre_tokenize_str(normalizer.normalize_str(text))]
        assert cut == tokenize(text), text


def test_a_translation_folder_opens_through_the_door_as_it_was_trained(tmp_path):
    """config.json names the layout, the door reads ``source <eos> <bos>`` (no template)
    and translates the ids the trainee's own greedy decoding writes."""
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings, TranslationError
    from core.model.trainee import export_folder

    corpus = tiny_corpus()
    vocab = corpus.src_vocab
    trainee = random_trainee(vocab)
    data = {"source": "tiny.tsv", "split": "head", "min_freq": 1}
    folder = export_folder(trainee, vocab, tmp_path / "best.hf", "translation", data)
    entry = json.loads((folder / "config.json").read_text("utf-8"))["attention_studio"]
    assert entry == {"task": "translation", "layout": "source-eos-bos", "data": data}
    lm = open_model(str(folder))
    assert lm.meta["data_config"] == data
    for sentence in ("I'm home.", "He's calm.", "Go."):
        t = lm.translate(sentence, DecodeSettings(max_len=8))
        ids = vocab.encode(tokenize(sentence)) + [Vocab.eos_id]
        assert lm.source(sentence).ids == ids  # as training read it: words, then <eos>
        assert t.out_ids == stepwise_greedy(trainee, ids, 8)
        assert t.decoder_inputs[0] == "<bos>"
    with pytest.raises(TranslationError, match="takes no prompt template") as refused:
        lm.with_prompt("Translate: {src}\nFrench:")
    assert lm.supports("template") == str(refused.value)  # asked before, in the same words
    lm_task = open_model(str(export_folder(trainee, vocab, tmp_path / "lm.hf", "lm", data)))
    assert lm_task.source("I'm home.").ids == lm.source("I'm home.").ids  # the lm task read the
    # same text, packed: it was prompted "English: {src}\nFrench:", a text it never read
    assert "trained here on the lm task" in lm_task.supports("template")
    config = tmp_path / "lm.hf" / "config.json"  # a folder written before it named its layout
    written = json.loads(config.read_text("utf-8"))
    del written["attention_studio"]["layout"]
    config.write_text(json.dumps(written), encoding="utf-8")
    assert open_model(str(config.parent)).source("I'm home.").ids == lm.source("I'm home.").ids


# ----------------------------------------------------------------------------- a run


@pytest.fixture(scope="module")
def decoder_run(tmp_path_factory):
    """A decoder-only model trained on the tiny corpus's translations (24 pairs, 6 held out)."""
    from core.train import main

    out = tmp_path_factory.mktemp("decoder-translation") / "run"
    model = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_DECODER.items()]
    more = ["--num-train=24", "--num-val=6", "--epochs=60", "--eval-every=30"]
    assert main([*TINY_ARGS, *model, *more, "--probes", "go .", "--out", str(out)]) == 0
    return out


@pytest.mark.slow  # trains a model
def test_a_decoder_only_run_on_translation_measures_bleu_and_keeps_probe_maps(decoder_run):
    from core.runs.run_dir import RunDir

    rd = RunDir(decoder_run)
    evals = [r for r in rd.read_metrics() if r.get("record") == "eval"]
    assert [r["step"] for r in evals] == [30, 60]
    assert all("val_bleu" in r and r["examples"] for r in evals)
    last = sorted((decoder_run / "snapshots").glob("step_*.pt"))[-1]
    snapshot = torch.load(last, weights_only=True)
    probe = snapshot["probes"][0]
    assert probe["src_tokens"] == ["go", ".", "<eos>"]
    T = len(probe["output_tokens"])
    assert probe["cross"].shape[-2:] == (T, 3) and probe["encoder"].shape[-2:] == (3, 3)


@pytest.mark.slow  # trains a model
def test_the_runs_folder_translates_as_the_trainee_and_evaluates_on_its_split(decoder_run, capsys):
    from core.evaluate import main as evaluate
    from core.model.checkpoints import read_checkpoint
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings
    from core.runs.run_dir import RunDir

    rd = RunDir(decoder_run)
    ckpt = read_checkpoint(rd.best)
    trainee = build_model(ModelConfig(**ckpt["model_config"]))
    trainee.load_state_dict(ckpt["state_dict"])
    trainee.eval()
    vocab = Vocab(ckpt["src_vocab"])
    lm = open_model(str(rd.folder_of(rd.best)))
    for sentence in ("I'm home.", "Thank you."):
        ids = vocab.encode(tokenize(sentence)) + [Vocab.eos_id]
        assert lm.translate(sentence, DecodeSettings()).out_ids == stepwise_greedy(trainee, ids, 50)
    capsys.readouterr()
    assert evaluate(["--checkpoint", str(rd.folder_of(rd.best)), "--split", "val",
                     "--data", str(TINY)]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["sentences"] == 6  # the run's 6 held out


def test_the_shipped_decoder_only_model_translates_by_its_layout():
    """checkpoints/fra-eng-decoder.hf (docs/training.md says how it was made): a decoder-only
    model trained here on fra-eng, read through the door as it was trained, with its history."""
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings
    from core.runs.history import HistoryFile
    from tests.helpers import ROOT

    folder = ROOT / "checkpoints" / "fra-eng-decoder.hf"
    lm = open_model(str(folder))
    assert lm.meta["layout"] == "source-eos-bos" and lm.meta["data_config"]["split"] == "random"
    t = lm.translate("I'm home.", DecodeSettings())
    assert t.src_tokens[-1] == "<eos>" and t.decoder_inputs[0] == "<bos>"
    assert t.words == ["je", "suis", "chez", "moi", "."]
    evals = [r for r in HistoryFile(folder.with_suffix(".history")).read_metrics()
             if r.get("record") == "eval"]  # fmt: skip
    assert max(r["val_bleu"] for r in evals) > 50
