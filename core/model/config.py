"""The model's sizes: ``ModelConfig``, saved inside every checkpoint, and their upper bounds."""

from __future__ import annotations

from dataclasses import dataclass

from core.config_fields import too_large, type_problems
from core.model.dropout import MASKS

ARCHS = ("encoder-decoder", "decoder-only", "encoder")  # the d2l model, Llama-style, BERT-style
ONE_VOCABULARY = ("decoder-only", "encoder")  # the archs of one stack over one vocabulary


def attention_layers(model) -> dict[str, int]:
    """Layers holding each kind's maps in a model of these sizes (a ModelConfig as a dict):
    the encoder-decoder's encoder, decoder and cross layers; a decoder-only model's one stack
    for every kind (a translation's three blocks of one causal pass); an encoder's one stack as
    encoder self-attention alone."""
    arch = model.get("arch", ARCHS[0])
    enc, dec = int(model["num_encoder_layers"]), int(model["num_decoder_layers"])
    if arch == "decoder-only":
        return {"encoder": dec, "decoder_self": dec, "cross": dec}
    if arch == "encoder":
        return {"encoder": enc, "decoder_self": 0, "cross": 0}
    return {"encoder": enc, "decoder_self": dec, "cross": dec}


MODEL_UPPER = {  # the most each size may be: what one machine trains and the pages show
    "src_vocab_size": 1_000_000,
    "tgt_vocab_size": 1_000_000,
    "d_model": 4096,
    "num_heads": 64,
    "num_encoder_layers": 24,
    "num_decoder_layers": 24,
    "d_ff": 16384,
    "max_positions": 4096,
    "num_kv_heads": 64,  # the position table is built for encoder and decoder
}


@dataclass
class ModelConfig:
    """Sizes of the encoder-decoder Transformer; saved inside every checkpoint."""

    src_vocab_size: int  # number of source (English) word types, specials included
    tgt_vocab_size: int  # number of target (French) word types, specials included
    d_model: int = 256  # model width D (d2l: num_hiddens)
    num_heads: int = 4  # attention heads H; D must be divisible by H
    num_encoder_layers: int = 2  # encoder blocks
    num_decoder_layers: int = 2  # decoder blocks
    d_ff: int = 64  # position-wise FFN hidden width (d2l: ffn_num_hiddens)
    dropout: float = 0.2  # dropout on embeddings, attention weights and sublayer outputs
    max_positions: int = 512  # longest sequence the positional-encoding table covers
    norm_first: bool = False  # False: post-LN AddNorm as in the paper; True: pre-LN
    pad_id: int = 0  # id of <pad> in both vocabularies
    dropout_masks: str = "bits"  # "bits": 16-bit masks (core.model.dropout); "bernoulli": torch's
    arch: str = "encoder-decoder"  # the d2l model, "decoder-only" (Llama) or "encoder" (BERT)
    num_kv_heads: int = 0  # decoder-only: key/value heads (grouped-query attention; 0 = num_heads)

    def problems(self) -> list[str]:
        """Every reason these sizes cannot build a model, each naming its field ([] if none)."""
        return type_problems(self) or self.size_problems()

    def validate(self) -> None:
        """Raise ValueError with every one of ``problems()``."""
        if problems := self.problems():
            raise ValueError("Invalid model settings: " + "; ".join(problems))

    def size_problems(self) -> list[str]:
        """Why these sizes cannot build a model (fields of the right types only)."""
        problems = []
        at_least_one = ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff")
        for name in (*at_least_one, "num_encoder_layers", "num_decoder_layers"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.num_heads >= 1 and self.d_model % self.num_heads:
            problems.append(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1) (got {self.dropout})")
        if self.dropout_masks not in MASKS:
            problems.append(f"dropout_masks must be one of {MASKS} (got {self.dropout_masks!r})")
        if self.arch not in ARCHS:
            problems.append(f"arch must be one of {ARCHS} (got {self.arch!r})")
        kv = self.num_kv_heads or self.num_heads
        if self.num_kv_heads < 0 or (self.num_heads >= 1 and kv >= 1 and self.num_heads % kv):
            problems.append(
                f"num_kv_heads must be 0 or divide num_heads "
                f"({self.num_heads}; got {self.num_kv_heads})"
            )
        if self.arch in ONE_VOCABULARY and self.src_vocab_size != self.tgt_vocab_size:
            problems.append(f"an {self.arch} model reads and writes one vocabulary")
        if self.max_positions < 2:
            problems.append(f"max_positions must be at least 2 (got {self.max_positions})")
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            problems.append(f"pad_id must be an id of both vocabularies (got {self.pad_id})")
        return problems + too_large(self, MODEL_UPPER)
