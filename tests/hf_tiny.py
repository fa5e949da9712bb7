"""Tiny random Hugging Face encoder-decoders for tests, built offline the way transformers'
own suite builds them: a small config, random weights, a word-level tokenizer built with
``tokenizers``, all written with ``save_pretrained`` into a folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SPECIALS = ["<pad>", "</s>", "<unk>", "<s>"]  # ids 0, 1, 2, 3 in every tiny model
ENGLISH = "i am cold hot tired home the boy girl is tall small . you are he she we they"
FRENCH = "je suis froid chaud fatigué maison le garçon fille est grand petit tu es il elle nous"
WORDS = [*ENGLISH.split(), *FRENCH.split()]
LANGUAGES = ["__en__", "__fr__", "__de__"]  # the M2M100 tiny model's language codes
FAMILIES = ("marian", "bart", "t5", "m2m_100")


def word_tokenizer(codes=()):
    """A whitespace word-level fast tokenizer that appends </s>."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIALS, *codes, *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        bos_token="<s>",
        additional_special_tokens=list(codes),
    )


def tiny_config(family: str, vocab_size: int):
    """A 2+2-layer, 4-head, 32-wide config of one family."""
    from transformers import BartConfig, M2M100Config, MarianConfig, T5Config

    ids = {"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 3}
    bart_like = {
        "vocab_size": vocab_size,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 64,
        **ids,
    }
    if family == "marian":
        return MarianConfig(**bart_like, decoder_start_token_id=0, forced_eos_token_id=1)
    if family == "bart":
        return BartConfig(**bart_like, decoder_start_token_id=1, forced_bos_token_id=None)
    if family == "m2m_100":
        return M2M100Config(**bart_like, decoder_start_token_id=1)
    if family == "t5":
        return T5Config(
            vocab_size=vocab_size,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            decoder_start_token_id=0,
            **ids,
        )
    raise ValueError(family)


def save_tiny(folder, family: str = "marian", seed: int = 0) -> Path:
    """Build one tiny random model with its tokenizer and save both into ``folder``."""
    from transformers import AutoModelForSeq2SeqLM

    codes = LANGUAGES if family == "m2m_100" else ()
    tokenizer = word_tokenizer(codes)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config(family, len(tokenizer)))
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if family == "marian":  # as opus-mt's tokenizer config names its languages
        path = folder / "tokenizer_config.json"
        config = json.loads(path.read_text()) | {"source_lang": "en", "target_lang": "fr"}
        path.write_text(json.dumps(config))
    return folder


def save_marian_spm(folder, seed: int = 0) -> Path:
    """A tiny random Marian model with opus-mt's own tokenizer layout: a SentencePiece
    model trained here on a few test sentences (source.spm = target.spm), vocab.json,
    ``MarianTokenizer`` (en→fr), as Helsinki-NLP's folders hold them."""
    import warnings

    import sentencepiece as spm
    from transformers import MarianMTModel, MarianTokenizer

    folder = Path(folder)
    work = folder.with_name(folder.name + "-spm")
    work.mkdir(parents=True, exist_ok=True)
    lines = [f"{e} ." for e in (ENGLISH, FRENCH)] + ["the boy is tall .", "le garçon est grand ."]
    (work / "corpus.txt").write_text("\n".join(lines * 20), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(work / "corpus.txt"),
        model_prefix=str(work / "sp"),
        vocab_size=40,
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(work / "sp.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tokenizer = MarianTokenizer(
            source_spm=str(work / "sp.model"),
            target_spm=str(work / "sp.model"),
            vocab=str(work / "vocab.json"),
            source_lang="en",
            target_lang="fr",
        )
    config = tiny_config("marian", len(vocab))
    config.pad_token_id = config.decoder_start_token_id = vocab["<pad>"]
    config.eos_token_id = config.forced_eos_token_id = 0
    torch.manual_seed(seed)
    MarianMTModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
