"""Head ablation: remove attention heads at inference, by name.

A removed head's output is multiplied by a gate of 0 before W_o (its ``z`` hook site,
``TranslationModel.heads_removed``), in the calling thread only: a model shared by every
session is never changed for another. Its attention weights are still computed. Heads are
written "KIND:LAYER:HEAD,..." (kinds ``encoder``, ``decoder_self``, ``cross``; layer and head
from 0). ``sentence_removed`` is what the Remove heads section shows of a sentence and
``python -m core.ablate --heads H --sentence S`` prints: the translation with and without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from core.attention.kinds import KIND_NAMES, KINDS
from core.model.checked_translation import translate_sentence
from core.model.config import ModelConfig
from core.model.interface import TranslationModel
from core.model.parts import GREEDY, DecodeSettings, Translation

SHOWN_CHARS = 40  # a bad head specification is quoted up to this many characters


class HeadSpecError(ValueError):
    """A head specification is malformed or names a head this model does not have."""


# ----------------------------------------------------------------------------- head specs


@dataclass(frozen=True)
class HeadSpec:
    """One attention head: its kind ("encoder", "decoder_self", "cross"), layer and head."""

    kind: str
    layer: int  # from 0
    head: int  # from 0

    @property
    def spec(self) -> str:
        """The head as written in a specification: "cross:1:2"."""
        return f"{self.kind}:{self.layer}:{self.head}"

    @property
    def label(self) -> str:
        """The head in words for a picker: "Cross L1 H2"."""
        return f"{KIND_NAMES[self.kind]} L{self.layer} H{self.head}"

    def order(self) -> tuple[int, int, int]:
        """Sort key: kinds in KINDS order, then layer, then head."""
        return KINDS.index(self.kind), self.layer, self.head


def _shown(text: str) -> str:
    """User text quoted in a message, cut to SHOWN_CHARS."""
    text = " ".join(str(text).split())
    return repr(text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…")


def parse_head(item: str) -> HeadSpec:
    """One "KIND:LAYER:HEAD" (layer and head from 0), or HeadSpecError saying what is wrong."""
    parts = [p.strip() for p in item.split(":")]
    if len(parts) != 3:
        raise HeadSpecError(f"{_shown(item)} is not KIND:LAYER:HEAD (e.g. cross:0:1).")
    kind, layer, head = parts
    if kind not in KINDS:
        raise HeadSpecError(
            f"Unknown attention kind {_shown(kind)} in {_shown(item)}: use encoder, "
            "decoder_self or cross."
        )
    if not (re.fullmatch(r"[0-9]{1,6}", layer) and re.fullmatch(r"[0-9]{1,6}", head)):
        raise HeadSpecError(f"Layer and head must be whole numbers from 0 in {_shown(item)}.")
    return HeadSpec(kind, int(layer), int(head))


def parse_heads(text: str) -> list[HeadSpec]:
    """The heads of "KIND:LAYER:HEAD,..." ("" = none), sorted, each once."""
    items = [part.strip() for part in str(text).split(",")]
    heads = {parse_head(item) for item in items if item}
    return sorted(heads, key=HeadSpec.order)


def layer_count(cfg: ModelConfig, kind: str) -> int:
    """Layers of one attention kind in a model."""
    return cfg.num_encoder_layers if kind == "encoder" else cfg.num_decoder_layers


def check_heads(
    heads: Iterable[HeadSpec], cfg: ModelConfig, kinds: Sequence[str] = KINDS
) -> list[HeadSpec]:
    """The heads, if this model (its heads of ``kinds``) has every one of them; else
    HeadSpecError naming the first."""
    heads = list(heads)
    for h in heads:
        if h.kind not in kinds:
            raise HeadSpecError(
                f"{h.spec}: this model's heads are {' and '.join(kinds)} heads (a decoder-only "
                "model has one attention per layer)."
            )
        layers = layer_count(cfg, h.kind)
        if not 0 <= h.layer < layers:
            where = "encoder" if h.kind == "encoder" else "decoder"
            raise HeadSpecError(
                f"{h.spec}: this model has {layers} {where} layers (0..{layers - 1})."
            )
        if not 0 <= h.head < cfg.num_heads:
            raise HeadSpecError(
                f"{h.spec}: this model has {cfg.num_heads} heads per layer "
                f"(0..{cfg.num_heads - 1})."
            )
    return heads


def heads_of(text: str, cfg: ModelConfig, kinds: Sequence[str] = KINDS) -> list[HeadSpec]:
    """The checked heads of a specification for this model (HeadSpecError if any is bad)."""
    return check_heads(parse_heads(text), cfg, kinds)


def spec_text(heads: Iterable[HeadSpec]) -> str:
    """The specification of some heads: "cross:0:1,cross:1:2" (sorted, each once)."""
    return ",".join(h.spec for h in sorted(set(heads), key=HeadSpec.order))


def all_heads(cfg: ModelConfig, kinds: Sequence[str] = KINDS) -> list[HeadSpec]:
    """Every head of a model (of ``kinds``: ``TranslationModel.head_kinds``), in order."""
    return [
        HeadSpec(kind, layer, head)
        for kind in kinds
        for layer in range(layer_count(cfg, kind))
        for head in range(cfg.num_heads)
    ]


# ----------------------------------------------------------------------------- removing


@contextmanager
def ablated(m: TranslationModel, heads: Iterable[HeadSpec]):
    """Remove ``heads`` (each one's output zeroed before W_o) inside the block, in this thread
    only (``TranslationModel.heads_removed``); HeadSpecError for a head the model lacks."""
    heads = check_heads(heads, m.cfg, m.head_kinds)
    with m.heads_removed([(h.kind, h.layer, h.head) for h in heads]):
        yield m


def removed_translation(
    m: TranslationModel,
    sentence: str,
    settings: DecodeSettings,
    heads: Iterable[HeadSpec],
    target: str = "",
) -> Translation:
    """A checked translation of ``sentence`` with ``heads`` removed (``target``: that output
    teacher-forced instead, as a token-sequence model reads its sequence), as the Remove heads
    section and ``python -m core.ablate --heads`` make it."""
    with ablated(m, heads):
        return translate_sentence(m, sentence, settings, target)


def removed_rows(t: Translation, cut: Translation, heads: Iterable[HeadSpec]) -> list[dict]:
    """Two rows, ``t`` and then ``cut`` (the same sentence with ``heads`` removed), as the
    Remove heads section shows them: the removed heads' spec ("" first), the text, its
    log-probability, its change from the first's (None in the first row) and the warnings
    the first row does not already have."""
    first = {"heads": "", "text": t.text, "log_prob": float(t.log_prob), "change": None}
    second = {"heads": spec_text(heads), "text": cut.text, "log_prob": float(cut.log_prob)}
    second |= {"change": float(cut.log_prob) - float(t.log_prob)}
    new = [w for w in cut.warnings if w not in t.warnings]
    return [first | {"warnings": list(t.warnings)}, second | {"warnings": new}]


def sentence_removed(
    m: TranslationModel, heads: str, sentence: str, settings: DecodeSettings = GREEDY
) -> list[dict]:
    """``sentence`` translated with ``settings`` as it is, then with ``heads``
    (``KIND:LAYER:HEAD,...``) removed: ``removed_rows`` of the two. Raises ``HeadSpecError``
    for a spec the model cannot read and ``TranslationError`` for a sentence it cannot
    translate."""
    removed = heads_of(heads, m.cfg, m.head_kinds)
    t = translate_sentence(m, sentence, settings)
    return removed_rows(t, removed_translation(m, sentence, settings, removed), removed)
