"""The studio's own checkpoint rebuilt as its Transformer: ``load_checkpoint`` and the
``LoadedModel`` it gives (weights, vocabularies and metadata together)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.corpus.bpe import checkpoint_vocabs
from core.corpus.vocab import Vocab
from core.model.checkpoints import (
    ENCODER_DECODER,
    DecoderOnlyCheckpointError,
    inconsistent,
    read_checkpoint,
)
from core.model.config import ModelConfig
from core.model.transformer import Transformer


@dataclass
class LoadedModel:
    """A model rebuilt from a checkpoint, with its vocabularies and metadata."""

    model: Transformer
    src_vocab: Vocab
    tgt_vocab: Vocab
    meta: dict = field(default_factory=dict)  # configs, step, metrics, ...

    family = "studio"  # the studio's own Transformer (core.model.hugging_face: "hugging face")

    @property
    def cfg(self) -> ModelConfig:
        """The model's sizes."""
        return self.model.cfg

    @property
    def subword(self) -> bool:
        """Whether a vocabulary of this model cuts words into pieces (BPE)."""
        return self.src_vocab.kind != "word" or self.tgt_vocab.kind != "word"


def load_checkpoint(path, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the model from the config saved in the checkpoint and load its weights."""
    ckpt = read_checkpoint(path)
    if (arch := (ckpt.get("model_config") or {}).get("arch", ENCODER_DECODER)) != ENCODER_DECODER:
        raise DecoderOnlyCheckpointError(path, str(arch))  # never a d2l Transformer of its config
    try:
        cfg = ModelConfig(**ckpt["model_config"])
        model = Transformer(cfg)
        state = {
            k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()
        }
        model.load_state_dict(state)
        vocabs = checkpoint_vocabs(ckpt)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise inconsistent(path, e) from e
    model.to(device).eval()
    meta = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer", "rng")}
    return LoadedModel(model, vocabs[0], vocabs[1], meta)
