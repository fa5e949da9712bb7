"""A Hugging Face encoder-decoder behind the one interface (``core.model.interface``): Marian
(opus-mt), BART, mBART, T5, M2M100, NLLB.

``HFModel`` answers every question the analysis asks of a model from an
``AutoModelForSeq2SeqLM`` (eager attention, eval mode) and its tokenizer: tokens by the
tokenizer (``core.model.hugging_face``), decoding by ``generate``, passes by the model's own
forward, and its hook sites by permanent forward hooks (``core.model.sites``). The token
embeddings the gradient methods differentiate are the embedding modules' outputs, put in
place by a hook: whatever the family scales after them (Marian's decoder multiplies the
``inputs_embeds`` it is given by √D, its encoder does not) is scaled as from ids.

Shape key: B batch, S source pieces, T decoder steps, D model width, V vocabulary.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from core.corpus.bpe import PREFIX
from core.corpus.text import tokenize
from core.model import batched, sites
from core.model import hugging_face as hf
from core.model.architectures import Architecture, architecture_of, part
from core.model.capabilities import HUGGING_FACE
from core.model.config import ModelConfig
from core.model.hf_folder import HFModelError, describe, studio_config
from core.model.hooks import HookPoint
from core.model.interface import TranslationModel
from core.model.parts import (
    MAX_LEN,
    AttentionWeights,
    DecodeSettings,
    Source,
    SublayerNorm,
    Translation,
    TranslationError,
    linear_parts,
)
from core.model.record import side_of
from core.model.scores import corpus_bleu
from core.places import shown_path, shown_paths


def _cut(ids: Sequence[int], end: int) -> list[int]:
    """Ids before the first ``end``."""
    ids = list(ids)
    return ids[: ids.index(end)] if end in ids else ids


def as_text(words: Sequence[str]) -> str:
    """d2l's words back to a sentence: no space before , . ! ? and a capital first letter."""
    text = re.sub(r" ([,.!?])", r"\1", " ".join(words))
    return text[:1].upper() + text[1:]


@dataclass
class HFModel(TranslationModel):
    """A Hugging Face encoder-decoder with its tokenizer, as the studio reads it."""

    model: nn.Module  # an AutoModelForSeq2SeqLM, eager attention, eval mode
    tokenizer: object  # its AutoTokenizer
    cfg: ModelConfig  # its sizes in the studio's terms (for budgets and head pickers)
    meta: dict = field(default_factory=dict)  # family, model type, languages, parameters
    family = HUGGING_FACE
    subword = True  # its tokenizer cuts words into pieces

    @property
    def pieces_name(self) -> str:
        """The tokenizer's algorithm as people name it ("SentencePiece", "BPE"…)."""
        return self.meta.get("pieces") or "subword"

    trained_here = False  # downloaded: no corpus, splits or history of the studio's

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

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else (self.model.config.pad_token_id or 0))

    @property
    def unk_id(self) -> int | None:
        return self.tokenizer.unk_token_id

    @property
    def mask_id(self) -> int | None:
        return self.tokenizer.mask_token_id

    def vocab_sizes(self) -> tuple[int, int]:
        n = self.model.get_input_embeddings().num_embeddings
        return n, n

    # ------------------------------------------------------------------ tokens

    def source(self, sentence: str) -> Source:
        ids = hf.encode_source(self, sentence)[0].tolist()
        unknown = [i == self.unk_id for i in ids]
        notes = ["Some words are not in the model's vocabulary (read as unknown)."]
        return Source(ids, self.source_tokens(ids), unknown, notes if any(unknown) else [])

    def source_notes(self, words: Sequence[str]) -> list[str]:
        return []  # its tokenizer has no word list to name unknown words by

    def token_count(self, text: str, words: Sequence[str], target: bool = False) -> int:
        kind = {"text_target": text} if target else {"text": text}
        limit = self.cfg.max_positions
        ids = self.tokenizer(**kind, truncation=True, max_length=limit)["input_ids"]
        return len(ids) + (1 if target else 0)  # a multilingual model's language code

    def target_ids(self, text: str, first: int | None = None) -> list[int]:
        ids = hf.target_ids(self, text, None)
        codes = set(self.tokenizer.convert_tokens_to_ids(self.meta.get("language_codes", [])))
        if first is not None and first in codes and ids[:1] != [first]:
            ids = [first, *ids][: self.cfg.max_positions - 1]
        return ids

    def words_to_source(self, words: Sequence[str]) -> list[int]:
        limit = self.cfg.max_positions
        return self.tokenizer(as_text(words), truncation=True, max_length=limit)["input_ids"]

    def words_to_target(self, words: Sequence[str], target_lang=None) -> list[int]:
        return hf.target_ids(self, as_text(words), target_lang)

    def word_pieces(self, words: Sequence[str], target: bool):
        """(piece ids, the word of each piece) of pre-tokenized words: each word cut alone
        (with the leading space a byte-level BPE expects), no specials."""
        ids, owner = [], []
        spaced = self.meta.get("tokens") == "byte-level"
        for i, word in enumerate(words):
            text = f" {word}" if spaced and i else word
            kwargs = {"text_target": text} if target else {"text": text}
            encoded = self.tokenizer(**kwargs, add_special_tokens=False)["input_ids"]
            ids += encoded
            owner += [i] * len(encoded)
        return ids, owner

    def framing(self, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
        """(the specials before, the specials after) the tokenizer puts around a sentence;
        the ones after always start with the end token."""
        text = " ".join(words)
        kwargs = {"text_target": text} if target else {"text": text}
        whole = self.tokenizer(**kwargs)["input_ids"]
        bare = self.tokenizer(**kwargs, add_special_tokens=False)["input_ids"]
        lead = next(
            (i for i in range(len(whole) - len(bare) + 1) if whole[i : i + len(bare)] == bare), 0
        )
        prefix, suffix = whole[:lead], whole[lead + len(bare) :]
        if not suffix or suffix[0] != self.eos_id:
            suffix = [self.eos_id, *suffix]
        return prefix, suffix

    def source_tokens(self, ids: Sequence[int]) -> list[str]:
        return hf.shown_tokens(self, ids)

    def target_tokens(self, ids: Sequence[int]) -> list[str]:
        return hf.shown_tokens(self, ids)

    def target_words(self, ids: Sequence[int]) -> list[str]:
        return hf.words_of(self, ids)

    def scored_words(self, ids: Sequence[int]) -> list[str]:
        ids = list(ids)
        ids = ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids
        return tokenize(self.tokenizer.decode(ids, skip_special_tokens=True))

    def target_token_id(self, token: str) -> int:
        raw = [token[len(PREFIX) :]] if token.startswith(PREFIX) else [token]
        raw += [mark + token for mark in hf.WORD_STARTS if not token.startswith(PREFIX)]
        unk = self.unk_id
        for candidate in raw:
            tid = self.tokenizer.convert_tokens_to_ids(candidate)
            if tid is not None and tid != unk:
                return int(tid)
        return int(unk if unk is not None else self.eos_id)

    def unknown_target_words(self, text: str) -> list[str]:
        return hf.unknown_target_words(self, text)

    def tokens_key(self) -> object:
        return ("tokenizer", id(self.tokenizer))  # its own tokenizer, its own specials

    def special_ids(self) -> set[int]:
        return set(self.tokenizer.all_special_ids) - {self.unk_id}

    def language_code(self, language: str = "fr") -> str | None:
        codes = self.meta.get("language_codes") or []
        starts = (language, {"fr": "fra", "en": "eng", "de": "deu"}.get(language, language))
        return next((c for c in codes if c.strip("_<>").lower().startswith(starts)), None)

    def language_id(self, code: str | None) -> int | None:
        return hf.forced_bos(self, code)

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

    def max_output(self, longest: int) -> int:
        """1.5x the longest source plus 5 (French runs about 1.2x English in pieces), at most
        MAX_LEN: a trained model stops at its end token well before."""
        return min(MAX_LEN, longest + longest // 2 + 5, self.cfg.max_positions - 1)

    def evaluate(self, split, max_sentences: int = 0, target_lang: str | None = None) -> dict:
        """As the studio's models are evaluated (``core.model.scores.evaluate_split``), the
        unknown share counted in output pieces, the loss per piece."""
        groups = split.groups()
        groups = groups[: max_sentences or len(groups)]
        sources = [self.words_to_source(src) for src, _ in groups]
        pairs = [
            (s, self.words_to_target(ref, target_lang))
            for s, (_, refs) in zip(sources, groups)
            for ref in refs
        ]
        start = time.perf_counter()
        outputs = batched.greedy_outputs(self, sources, target_lang)
        seconds = time.perf_counter() - start
        pieces = [i for row in outputs for i in _cut(row, self.eos_id) if i != self.pad_id]
        hyps = [self.scored_words(row) for row in outputs]
        return {
            "bleu": corpus_bleu(hyps, [refs for _, refs in groups]),
            "unk_share": sum(i == self.unk_id for i in pieces) / max(len(pieces), 1),
            "loss": batched.mean_loss(self, pairs),
            "sentences": len(groups),
            "sentences_per_s": len(groups) / max(seconds, 1e-9),
        }

    def translate_lines(self, lines: list[str], settings: DecodeSettings):
        outs, notes = [""] * len(lines), []
        for i, line in enumerate(lines):
            try:
                t = self.translate(line, settings)
            except TranslationError as e:
                notes.append(f"line {i + 1}: {e}")
                continue
            outs[i] = t.text
            notes += [f"line {i + 1}: {w}" for w in t.warnings]
        return outs, notes

    # ------------------------------------------------------------------ passes

    def masks(self, src, tgt_in):
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
        return (src != self.pad_id)[:, None, None, :], causal.expand(tgt_in.size(0), 1, T, T)

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

    @property
    def _architecture(self) -> Architecture:
        """Its family's row of the table (``core.model.architectures``)."""
        return architecture_of(self.model)

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

    def output_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight

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

    def hook_points(self) -> dict[str, HookPoint]:
        return sites.install(self.model, self._architecture)

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
