"""A Hugging Face encoder-decoder behind the one interface (``core.model.interface``): Marian
(opus-mt), BART, mBART, T5, M2M100, NLLB.

``HFModel`` answers every question the analysis asks of a model from an
``AutoModelForSeq2SeqLM`` (eager attention, eval mode) and its tokenizer: tokens by the
tokenizer (``core.model.hf_base``, what every Hugging Face adapter shares, and
``core.model.hugging_face``), decoding by ``generate``, passes by the model's own
forward, and its hook sites by permanent forward hooks (``core.model.sites``). The token
embeddings the gradient methods differentiate are the embedding modules' outputs, put in
place by a hook: whatever the family scales after them (Marian's decoder multiplies the
``inputs_embeds`` it is given by √D, its encoder does not) is scaled as from ids.

Shape key: B batch, S source pieces, T decoder steps, D model width, V vocabulary.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from core.model import hugging_face as hf
from core.model import sites
from core.model.architectures import part
from core.model.capabilities import HUGGING_FACE
from core.model.hf_base import HFBase
from core.model.hf_config import studio_config
from core.model.hf_folder import HFModelError, describe
from core.model.interface import TranslationModel
from core.model.parts import (
    AttentionWeights,
    DecodeSettings,
    SublayerNorm,
    Translation,
    linear_parts,
)
from core.model.record import side_of
from core.places import shown_path, shown_paths


@dataclass
class HFModel(HFBase, TranslationModel):
    """A Hugging Face encoder-decoder with its tokenizer, as the studio reads it."""

    family = HUGGING_FACE

    # ------------------------------------------------------------------ what it is

    @property
    def source_label(self) -> str:
        source, _ = self.languages
        return "Source sentence" + (f" ({source})" if source != "source" else "")

    @property
    def target_name(self) -> str:
        _, target = self.languages
        return target if target != "target" else "target language"

    @property
    def start_id(self) -> int:
        return int(self.model.config.decoder_start_token_id)

    @property
    def eos_id(self) -> int:
        return int(self.model.config.eos_token_id)

    # ------------------------------------------------------------------ decoding

    def translate(self, sentence: str, settings: DecodeSettings) -> Translation:
        return hf.translate(self, sentence, settings, settings.target_lang or None)

    def force(self, sentence: str, target: str, settings: DecodeSettings) -> Translation:
        return hf.forced_translation(
            self, sentence, target, settings.topk, settings.target_lang or None
        )

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, max_len: int, target_lang: str | None = None, memory=None):
        kwargs = {}
        if (forced := hf.forced_bos(self, target_lang)) is not None:
            kwargs["forced_bos_token_id"] = forced
        if memory is not None:
            from transformers.modeling_outputs import BaseModelOutput  # imported only when used

            kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=memory)
        out = self.model.generate(
            input_ids=src,
            attention_mask=(src != self.pad_id).long(),
            num_beams=1,
            do_sample=False,
            max_new_tokens=max_len,
            **kwargs,
        )
        return out[:, 1:]  # (B, T) without the start token

    # ------------------------------------------------------------------ passes

    def run(self, src, tgt_in, memory=None, need_weights: bool = False) -> torch.Tensor:
        extra = {} if memory is None else {"encoder_outputs": (memory,)}
        out = self.model(
            input_ids=src,
            attention_mask=(src != self.pad_id).long(),
            decoder_input_ids=tgt_in,
            use_cache=False,
            return_dict=True,
            **extra,
        )
        return out.logits  # (B, T, V)

    def encode(self, src) -> torch.Tensor:
        mask = (src != self.pad_id).long()
        return self.model.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state

    def hidden(self, src, tgt_in, memory=None) -> torch.Tensor:
        memory = self.encode(src) if memory is None else memory
        return self.model.get_decoder()(
            input_ids=tgt_in,
            encoder_hidden_states=memory,
            encoder_attention_mask=(src != self.pad_id).long(),
            use_cache=False,
        )[0]  # (B, T, D), after the decoder's final norm where it has one

    def _rescaled(self) -> bool:
        """Whether its decoder's output is multiplied by d^-1/2 before ``lm_head`` (T5, UMT5
        with tied embeddings)."""
        quirk = "rescale_tied_output" in self._architecture.quirks
        return quirk and bool(self.model.config.scale_decoder_outputs)

    def _logits_bias(self) -> torch.Tensor | None:
        """The bias added after ``lm_head`` (``final_logits_bias``: Marian, BART, mBART)."""
        quirk = "final_logits_bias" in self._architecture.quirks
        return self.model.final_logits_bias if quirk else None

    def logits_of(self, hidden, weight=None) -> torch.Tensor:
        """As the model's own forward makes them: T5's d^-1/2 rescaling, ``lm_head``,
        ``final_logits_bias``."""
        if self._rescaled():
            hidden = hidden * self.model.config.d_model**-0.5
        head = part(self.model, self._architecture.head)
        if weight is None:
            logits = head(hidden)  # (..., V)
        else:
            logits = nn.functional.linear(hidden.to(weight.dtype), weight, head.bias)
        bias = self._logits_bias()
        return logits if bias is None else logits + bias

    def lens(self, stream) -> torch.Tensor:
        norm = sites.final_norm(self.model)
        return self.logits_of(stream if norm is None else norm(stream))

    def lens_words(self) -> str:
        steps = []
        if (norm := sites.final_norm(self.model)) is not None:
            steps.append(f"the decoder's final norm ({type(norm).__name__})")
        if self._rescaled():
            steps.append("the d^-1/2 rescaling of tied embeddings (T5)")
        steps.append("lm_head")
        if self._logits_bias() is not None:
            steps.append("final_logits_bias")
        return "each decoder layer's output through " + ", then ".join(steps)

    # ------------------------------------------------------------------ structure

    def _layer(self, kind: str, layer: int) -> nn.Module:
        self.check_layer(kind, layer)
        return sites.layers_of(sites.stack(self.model, side_of(kind)))[layer]

    def attention_weights(self, kind: str, layer: int) -> AttentionWeights:
        module = sites.attention_of(self._layer(kind, layer), kind)
        heads, width = sites.head_geometry(module)
        parts = [linear_parts(m) for m in sites.projections(module)]
        scale = self._architecture.scale_of(module)  # T5: 1, no 1/√Dh
        return AttentionWeights(*(t for pair in parts for t in pair), heads, width, scale)

    def sublayer_norm(self, kind: str, layer: int) -> SublayerNorm:
        block = self._layer(kind, layer)
        pre = self._architecture.norm == "pre"
        return SublayerNorm(pre, sites.sublayer_norm(block, kind))


# ----------------------------------------------------------------------------- loading


def held_parameters(info: dict) -> int:
    """Parameters loading a described folder (``describe``) will hold: its config's count
    (``hf_size``: every family of the table has one), or its weight files' if they hold more."""
    return max(int(info["config_parameters"]), int(info["parameters"]))


def check_size(info: dict, max_bytes: int | None) -> None:
    """HFModelError when the model its config describes (or its weights, if larger) passes
    ``max_bytes`` in float32."""
    if max_bytes is None:
        return
    count = held_parameters(info)
    if 4 * count > max_bytes:
        raise HFModelError(
            f"This model has {count / 1e6:,.0f} M parameters ({4 * count / 2**30:.1f} GB in "
            f"float32); this server opens models of at most {max_bytes / 2**30:.2f} GB."
        )


def check_complete(folder: Path, model: nn.Module, loading: dict) -> None:
    """HFModelError when the weight files leave parameters of the model out: those would be
    random, never the model's."""
    names = dict(model.named_parameters())
    missing = [k for k in loading.get("missing_keys") or () if k in names]
    if missing:
        raise HFModelError(
            f"{shown_path(folder)}'s weights do not cover the model: {len(missing)} tensors "
            f"are missing (e.g. {missing[0]}), so they would be random; save it whole with "
            "save_pretrained."
        )


def load_error(folder: Path, error: Exception) -> str:
    """Why transformers could not load a folder, in one line: the first line of its error,
    every path in it shown by the one rule (``places.shown_paths``)."""
    from safetensors import SafetensorError

    lines = str(error).strip().splitlines()
    first = shown_paths(lines[0], folder) if lines else type(error).__name__
    if isinstance(error, KeyError):
        first = f"KeyError {first}"
    if isinstance(error, SafetensorError):
        first = f"its safetensors weights are damaged ({first})"
    return f"{shown_path(folder)} cannot be loaded: {first}"


def from_folder(folder: Path, auto, prepare) -> tuple[nn.Module, object]:
    """(model, tokenizer) by ``auto`` as every folder is read: eager, safetensors, local, whole,
    a tokenizer that fits; ``prepare()``'s dict (a dtype) to ``from_pretrained``; HFModelError."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        extra = prepare()
        with warnings.catch_warnings():  # MarianTokenizer: "Recommended: pip install sacremoses"
            warnings.filterwarnings("ignore", message=".*sacremoses.*")
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model, loading = auto.from_pretrained(
            folder,
            attn_implementation="eager",
            local_files_only=True,
            use_safetensors=True,
            output_loading_info=True,
            **extra,
        )
    except HFModelError:
        raise
    except Exception as e:  # noqa: BLE001 - a folder damaged in any way: transformers',
        # safetensors' (SafetensorError) and tokenizers' (a plain Exception) own errors
        raise HFModelError(load_error(folder, e)) from e
    check_complete(folder, model, loading)
    hf.check_tokenizer(tokenizer, model.config)
    return model, tokenizer


def load(folder, device: str | torch.device = "cpu", max_bytes: int | None = None) -> HFModel:
    """An encoder-decoder folder (``from_folder``; eval mode); HFModelError in one line, its
    float32 weights past ``max_bytes`` too."""
    folder = Path(folder)
    info = describe(folder)
    from transformers import AutoModelForSeq2SeqLM

    model, tokenizer = from_folder(
        folder, AutoModelForSeq2SeqLM, lambda: check_size(info, max_bytes) or {}
    )
    model.to(device).eval()
    info["tokens"] = hf.tokenizer_kind(tokenizer)
    info["pieces"] = hf.tokenizer_algorithm(tokenizer)
    info["language_codes"] = hf.language_codes(tokenizer) if hf.multilingual(model.config) else []
    cfg = studio_config(model.config.to_dict())  # pre-LN as its family's row says
    return HFModel(model, tokenizer, cfg, info)
