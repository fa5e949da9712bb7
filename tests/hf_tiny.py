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
NLLB_LANGUAGES = ["eng_Latn", "fra_Latn", "deu_Latn"]  # NLLB's codes (FLORES-200's)
FAMILIES = ("marian", "bart", "t5", "m2m_100")  # what most Hugging Face tests read
CONFORMANCE = (*FAMILIES, "mbart", "t5-v1.1")  # every family the conformance suite reads
MULTILINGUAL = ("m2m_100", "mbart")  # their tiny tokenizers carry LANGUAGES
TINY = (*CONFORMANCE, "nllb", "mt5", "umt5")  # every tiny encoder-decoder (test_architectures)
MODEL_TYPES = {"t5-v1.1": "t5", "nllb": "m2m_100"}  # a tiny model's model_type, where not its name
REAL_FLAGS = {  # each family's flags as its real hub checkpoints ship them (their config.json)
    "marian": {  # Helsinki-NLP/opus-mt-en-fr (every opus-mt checkpoint): √d embedding scale,
        # static sinusoidal positions, one embedding shared by encoder, decoder and lm_head,
        # swish, post-LN; final_logits_bias is a buffer every Marian checkpoint carries
        "scale_embedding": True,
        "static_position_embeddings": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "activation_function": "swish",
        "normalize_before": False,
        "add_final_layer_norm": False,
    },
    "bart": {  # facebook/bart-base: learned positions (offset 2), layernorm_embedding (in the
        # architecture), no embedding scale, post-LN, gelu, tied embeddings
        "scale_embedding": False,
        "activation_function": "gelu",
        "normalize_before": False,
        "add_final_layer_norm": False,
        "tie_word_embeddings": True,
    },
    "mbart": {  # facebook/mbart-large-50-many-to-many-mmt: pre-LN with a final norm per
        # stack, layernorm_embedding, √d scale, gelu, the target language forced first
        "scale_embedding": True,
        "activation_function": "gelu",
        "normalize_before": True,
        "add_final_layer_norm": True,
        "tie_word_embeddings": True,
    },
    "m2m_100": {  # facebook/m2m100_418M (and NLLB's m2m_100 checkpoints): pre-LN, √d scale,
        # sinusoidal positions from the ids (padding skipped), relu
        "scale_embedding": True,
        "activation_function": "relu",
        "tie_word_embeddings": True,
    },
    "t5": {  # t5-small: relative position bias (32 buckets), RMSNorm pre-LN, no √d on q·k,
        # relu, tied embeddings (the decoder's output rescaled by d^-1/2 before lm_head)
        "feed_forward_proj": "relu",
        "tie_word_embeddings": True,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6,
    },
    "t5-v1.1": {  # google/t5-v1_1-small, google/flan-t5-small: gated-gelu, untied lm_head
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6,
    },
    "nllb": {  # facebook/nllb-200-distilled-600M: an m2m_100 checkpoint (pre-LN, √d scale,
        # sinusoidal positions, relu, tied), the decoder started by </s>, then the target's
        # code (fra_Latn) forced; its tokenizer puts the source's code first
        "scale_embedding": True,
        "activation_function": "relu",
        "tie_word_embeddings": True,
    },
    "mt5": {  # google/mt5-small: T5 v1.1's layers (gated-gelu, untied lm_head), 250k pieces
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6,
    },
    "umt5": {  # google/umt5-small: mT5's, a relative position bias in every layer
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6,
    },
}


def word_tokenizer(codes=(), source_code: str | None = None):
    """A whitespace word-level fast tokenizer that appends </s> (and puts ``source_code``
    first, as NLLB's tokenizer puts the source language's code)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIALS, *codes, *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    first = [(source_code, vocab[source_code])] if source_code else []
    tk.post_processor = processors.TemplateProcessing(
        single=f"{source_code} $A </s>" if source_code else "$A </s>",
        special_tokens=[*first, ("</s>", 1)],
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
    """A 2+2-layer, 4-head, 32-wide config of one family, with its real checkpoints' flags."""
    from transformers import (
        BartConfig,
        M2M100Config,
        MarianConfig,
        MBartConfig,
        MT5Config,
        T5Config,
        UMT5Config,
    )

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
        **REAL_FLAGS.get(family, {}),
    }
    if family == "marian":
        return MarianConfig(**bart_like, decoder_start_token_id=0, forced_eos_token_id=1)
    if family == "bart":
        return BartConfig(**bart_like, decoder_start_token_id=1, forced_bos_token_id=None)
    if family == "mbart":
        return MBartConfig(**bart_like, decoder_start_token_id=1)
    if family in ("m2m_100", "nllb"):
        return M2M100Config(**bart_like, decoder_start_token_id=1)
    if family in ("t5", "t5-v1.1", "mt5", "umt5"):
        cls = {"mt5": MT5Config, "umt5": UMT5Config}.get(family, T5Config)
        return cls(
            vocab_size=vocab_size,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
            **ids,
            **REAL_FLAGS[family],
        )
    raise ValueError(family)


def save_tiny(folder, family: str = "marian", seed: int = 0) -> Path:
    """Build one tiny random model with its tokenizer and save both into ``folder``."""
    from transformers import AutoModelForSeq2SeqLM

    codes = LANGUAGES if family in MULTILINGUAL else ()
    tokenizer = word_tokenizer(codes)
    if family == "nllb":  # NLLB's codes, the source's first
        tokenizer = word_tokenizer(NLLB_LANGUAGES, source_code="eng_Latn")
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config(family, len(tokenizer)))
    bias = getattr(model, "final_logits_bias", None)
    if bias is not None:  # a real checkpoint's is not zero: the lens and logits must add it
        bias.normal_(0.0, 0.5)
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
