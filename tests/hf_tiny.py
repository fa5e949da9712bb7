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
