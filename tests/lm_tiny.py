"""Tiny random decoder-only language models for tests, built offline: a small config with the
flags each family's real hub checkpoints ship with, random weights, a byte-level BPE tokenizer
trained here with ``tokenizers`` (as GPT-2's, SmolLM's and Qwen2's are byte-level BPE), all
written with ``save_pretrained`` into a folder."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.hf_tiny import ENGLISH, FRENCH

LM_FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "gemma", "bloom", "falcon", "phi", "gemma2")
END_OF_TEXT = "<|endoftext|>"
LM_REAL_FLAGS = {  # each family's flags as its real hub checkpoints ship them (config.json)
    "gpt2": {  # openai-community/gpt2: gelu_new, learned positions, LayerNorm 1e-5, tied
        # embeddings, q·k scaled by 1/√Dh, no layer-index scaling, bos = eos = <|endoftext|>
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
    },
    "llama": {  # HuggingFaceTB/SmolLM-135M (llama): RoPE θ 10 000, RMSNorm 1e-5, SwiGLU
        # (silu), grouped-query attention (9 heads, 3 key/value heads), no biases, tied
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
    },
    "qwen2": {  # Qwen/Qwen2-0.5B: RoPE θ 1 000 000, RMSNorm 1e-6, bias on q/k/v (in the
        # architecture), grouped-query attention (14 heads, 2 key/value heads), tied, no window
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
    },
    "mistral": {  # mistralai/Mistral-7B-v0.1: RoPE θ 10 000, RMSNorm 1e-5, grouped-query
        # attention (32 heads, 8 key/value heads), untied lm_head, a sliding window (4096 there;
        # 6 here, so that the tests' prompts are longer than it)
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "sliding_window": 6,
    },
    "gemma": {  # google/gemma-2b: RoPE θ 10 000, RMSNorm 1e-6 scaling by (1 + w), GeGLU
        # (gelu_pytorch_tanh), the embeddings scaled by √D, one key/value head (multi-query),
        # head width set apart from D / heads (256 there, 8 heads of 2048; 16 here, 4 of 32)
        "hidden_act": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "head_dim": 16,
        "attention_bias": False,
        "tie_word_embeddings": True,
    },
    "bloom": {  # bigscience/bloom-560m: ALiBi, LayerNorm 1e-5 (one on the embeddings too), the
        # residual the layer's input (not the norm's output), one dense W_o, tied embeddings
        "apply_residual_connection_post_layernorm": False,
        "layer_norm_epsilon": 1e-5,
        "pretraining_tp": 1,
        "slow_but_exact": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
    },
    "falcon": {  # tiiuae/falcon-7b: attention and MLP in parallel on one LayerNorm (1e-5),
        # one key/value head (multi-query, of 71 heads there), rotary positions θ 10 000, no
        # biases, no ALiBi, not the new decoder architecture (40B's), tied embeddings
        "alibi": False,
        "bias": False,
        "multi_query": True,
        "new_decoder_architecture": False,
        "parallel_attn": True,
        "layer_norm_epsilon": 1e-5,
        "rope_theta": 10000.0,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
    },
    "phi": {  # microsoft/phi-2: attention and MLP in parallel on one LayerNorm (1e-5), RoPE θ
        # 10 000 on 0.4 of each head (32 of 80 dimensions there; 8 of 20 here, head_dim set
        # apart), gelu_new, biases, no q/k LayerNorm, an untied lm_head with a bias
        "hidden_act": "gelu_new",
        "layer_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.4,
        "qk_layernorm": False,
        "head_dim": 20,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "tie_word_embeddings": False,
    },
    "gemma2": {  # google/gemma-2-2b: Gemma's RMSNorm (1 + w) 1e-6, √D embeddings and GeGLU, q·k
        # scaled by query_pre_attn_scalar^-1/2 (256 = its head width there; 16 here), scores
        # soft-capped at 50 and logits at 30, a sliding window every other layer (4096 there;
        # 6 here), grouped-query attention (8 heads, 4 key/value heads; 4 and 2 here), tied
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 6,
        "attention_bias": False,
        "tie_word_embeddings": True,
    },
}
KV_HEADS = {"gpt2": 4, "llama": 2, "qwen2": 2, "mistral": 2, "gemma": 1, "bloom": 4, "falcon": 1,
            "phi": 4, "gemma2": 2}  # fmt: skip


def training_lines() -> list[str]:
    """What the tiny tokenizer learns its merges from: both word lists and prompts."""
    en, fr = ENGLISH.split(), FRENCH.split()
    pairs = [f"English: {' '.join(en[i : i + 4])}\nFrench: {' '.join(fr[i : i + 4])}\n"
             for i in range(0, len(en), 2)]  # fmt: skip
    return [ENGLISH, FRENCH, *pairs] * 5


def byte_level_tokenizer(bos: bool):
    """A byte-level BPE fast tokenizer (GPT-2's scheme), trained on ``training_lines``; a
    Llama-like one (``bos``) puts <s> first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = [END_OF_TEXT, "<s>"] if bos else [END_OF_TEXT]
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(training_lines(), trainer)
    if bos:
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tk.token_to_id("<s>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token=END_OF_TEXT,
        bos_token="<s>" if bos else END_OF_TEXT,
        pad_token=None if not bos else END_OF_TEXT,
    )


def tiny_lm_config(family: str, tokenizer):
    """A 2-layer, 4-head, 32-wide config of one family, with its real checkpoints' flags."""
    from transformers import (
        BloomConfig,
        FalconConfig,
        Gemma2Config,
        GemmaConfig,
        GPT2Config,
        LlamaConfig,
        MistralConfig,
        PhiConfig,
        Qwen2Config,
    )

    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id
    if family == "gpt2":
        return GPT2Config(
            vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=128,
            bos_token_id=eos, eos_token_id=eos, **LM_REAL_FLAGS[family],
        )  # fmt: skip
    if family in ("bloom", "falcon"):
        sizes = (
            {"n_layer": 2, "n_head": 4}
            if family == "bloom"
            else {"num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}
        )
        cls = BloomConfig if family == "bloom" else FalconConfig
        return cls(
            vocab_size=len(tokenizer), hidden_size=32, bos_token_id=eos, eos_token_id=eos,
            **sizes, **LM_REAL_FLAGS[family],
        )  # fmt: skip
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig,
           "phi": PhiConfig, "gemma2": Gemma2Config}.get(family)  # fmt: skip
    cls = cls or GemmaConfig
    return cls(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=KV_HEADS[family],
        max_position_embeddings=128, bos_token_id=bos, eos_token_id=eos,
        **LM_REAL_FLAGS[family],
    )  # fmt: skip


def save_tiny_lm(folder, family: str = "llama", seed: int = 0) -> Path:
    """Build one tiny random language model with its tokenizer and save both into ``folder``;
    every weight perturbed off its initial value (norms' gains and biases included)."""
    from transformers import AutoModelForCausalLM

    tokenizer = byte_level_tokenizer(bos=family in ("llama", "mistral", "gemma", "gemma2"))
    return saved(folder, AutoModelForCausalLM, tiny_lm_config(family, tokenizer), tokenizer, seed)


def saved(folder, auto, config, tokenizer, seed: int) -> Path:
    """A random model of ``config`` (every weight perturbed off its initial value: norms'
    gains and biases included) and its tokenizer, saved into ``folder``."""
    torch.manual_seed(seed)
    model = auto.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


ENCODER_FAMILIES = ("bert", "roberta", "distilbert", "electra")
ENCODER_REAL_FLAGS = {  # as their real hub checkpoints ship them (config.json)
    "bert": {  # google-bert/bert-base-uncased: post-LN, LayerNorm 1e-12, gelu, absolute
        # learned positions, two token types, the MLM decoder tied to the embeddings
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "tie_word_embeddings": True,
    },
    "roberta": {  # FacebookAI/roberta-base: LayerNorm 1e-5, one token type, positions
        # offset past the padding id (max_position_embeddings 514 = 512 + 2)
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-5,
        "type_vocab_size": 1,
        "tie_word_embeddings": True,
    },
    "distilbert": {  # distilbert/distilbert-base-uncased: BERT's post-LN layers (LayerNorm
        # 1e-12 in the code), gelu, learned positions (not sinusoidal), no token types, the
        # projector tied to the embeddings
        "activation": "gelu",
        "sinusoidal_pos_embds": False,
        "tie_weights_": True,
        "tie_word_embeddings": True,
    },
    "electra": {  # google/electra-small-generator: embeddings narrower than the stream (128
        # of 256 there; 16 of 32 here) projected up, LayerNorm 1e-12, gelu, two token types,
        # the generator's lm_head tied to the embeddings
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "embedding_size": 16,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "tie_word_embeddings": True,
    },
}


def wordpiece_tokenizer():
    """A WordPiece fast tokenizer (BERT's scheme: [CLS] … [SEP], [MASK]), trained here."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=specials, show_progress=False
    )
    tk.train_from_iterator(training_lines(), trainer)
    tk.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip


def roberta_tokenizer():
    """A byte-level BPE fast tokenizer as RoBERTa's: <s> … </s>, <pad> 1, <mask>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tk.train_from_iterator(training_lines(), trainer)
    tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", cls_token="<s>",
        sep_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
    )  # fmt: skip


def tiny_encoder_config(family: str, vocab: int):
    """A 2-layer, 4-head, 32-wide masked-LM config of one family, with its real checkpoints'
    flags."""
    from transformers import BertConfig, DistilBertConfig, ElectraConfig, RobertaConfig

    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64, "vocab_size": vocab}  # fmt: skip
    flags = ENCODER_REAL_FLAGS[family]
    if family == "distilbert":  # its own names: dim, n_layers, n_heads, hidden_dim
        return DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                max_position_embeddings=128, pad_token_id=0, **flags)  # fmt: skip
    if family == "roberta":
        ids = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
        return RobertaConfig(**sizes, max_position_embeddings=130, **ids, **flags)
    cls = ElectraConfig if family == "electra" else BertConfig
    return cls(**sizes, max_position_embeddings=128, pad_token_id=0, **flags)


def save_tiny_encoder(folder, family: str = "bert", seed: int = 0) -> Path:
    """A tiny random masked LM of one family with its tokenizer, saved into ``folder``."""
    from transformers import AutoModelForMaskedLM

    tokenizer = roberta_tokenizer() if family == "roberta" else wordpiece_tokenizer()
    config = tiny_encoder_config(family, len(tokenizer))
    return saved(folder, AutoModelForMaskedLM, config, tokenizer, seed)
