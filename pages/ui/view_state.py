"""What the Translate and Attention pages show, as it travels in the URL.

One flat state: the model, the sentence and decoding, the view (kind, layer, head), and each
Attention section's own fields. Which section writes which fields is that section's row of
``pages.ui.attention.sections.SECTIONS`` (``to_query``'s ``owned``): a field of one section
travels in the URL only while that section is shown. The choices a field is checked against
are the library's own (``core``), never copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from core.alignment.extract import MODES as ALIGN_MODES
from core.alignment.extract import WHOLE
from core.attention.kinds import KINDS
from core.attention.logit_lens import LENS_COLORS
from core.attention.maps import HEAD_AGGREGATES, head_options
from core.attention.patching import DIRECTIONS
from core.attention.projector import (
    COLOURS,
    DIMS,
    MAX_SENTENCES,
    METHODS,
    READS,
    SENTENCE_CHOICES,
    SENTENCES,
    SIDES,
)
from core.attention.sentence_maps import SentenceMaps
from core.attribution.contrast import CONTRAST_METHODS
from core.corpus.text import D2L_TEST_PAIRS
from core.model.checked_translation import DEFAULT_SENTENCE
from core.model.parts import ALPHA, ALPHAS, BEAM_SIZES, MAX_LEN, MAX_LENS, DecodeSettings

OLD_SECTIONS = {  # the section values of links made before the keys: the labels shown then
    "Maps": "maps",
    "Decoding playback": "playback",
    "Over training": "training",
    "Remove heads": "ablation",
    "Compare": "compare",
}
MAX_REFERENCE_CHARS = 1000  # a longer reference in a link is ignored
BOOK_REFERENCES = dict(D2L_TEST_PAIRS)  # the d2l chapter's sentences -> their references

MAX_TEXT_CHARS = 2000  # a longer text value in a URL falls back to its default
MAX_INDEX = 10_000  # a layer or step beyond any model: clamped here, then to the model
MAX_TRAINING_STEP = 10**12  # a training step beyond any run: clamped here, then to its snapshots


@dataclass
class ViewState:
    """What the pages show, as it travels in the URL (st.query_params)."""

    model: str = ""  # a ModelEntry key; "" = the default model
    sentence: str = DEFAULT_SENTENCE
    beam: int = 1  # beam size (1 = greedy)
    alpha: float = ALPHA  # beam length penalty
    max_len: int = MAX_LEN  # longest output
    target_lang: str = ""  # a multilingual Hugging Face model's target language code
    prompt: str = ""  # a prompted language model's template ("" = the default one)
    kind: str = "cross"  # attention kind shown
    layer: int = 0
    head: str = "0"  # a head number, "mean", "max" or "rollout"
    hide: bool = False  # hide <bos>/<eos> columns
    words: bool = False  # a subword (BPE) model's pieces merged into words
    section: str = "maps"  # what the Attention page shows (a key of its SECTIONS)
    step: int = 0  # output step of the decoding playback
    ablate: str = ""  # heads removed, "KIND:LAYER:HEAD,..." (core.ablate's spec)
    other: str = ""  # the compared model's key ("" = none)
    other_sentence: str = ""  # the compared sentence ("" = none)
    forced: str = "A"  # whose output both decoders read when two models' outputs differ
    token: str = ""  # selected token, "q<i>" (query row) or "k<j>" (key column)
    reference: str = ""  # French reference of `sentence` to force ("" = the d2l book's, if any)
    target: str = ""  # a translation the user typed, explained instead of the model's own
    corrupt: str = ""  # activation patching: the sentence patched into ("" = none yet)
    patch_dir: str = "denoise"  # ... "denoise" (clean into corrupted) or "noise"
    patch_ask: bool = False  # ... the user chooses the step (prefix) and the answers
    patch_prefix: str = ""  # ... the target words before that step
    patch_answer: str = ""  # ... the clean run's answer word ("" = its most likely)
    patch_wrong: str = ""  # ... the corrupted run's answer word ("" = its most likely)
    method: str = "alti"  # attribution method, one of core.attribution.methods.METHODS
    contrast_step: int = -1  # "Why this word": the output step (-1 = the first with another)
    contrast_word: str = ""  # ... the alternative word ("" = the step's likeliest other)
    contrast_method: str = CONTRAST_METHODS[0]  # ... the contrastive method
    align: str = ALIGN_MODES[0]  # alignment mode: "awo" (the step that predicts), "awi", "whole"
    both: bool = False  # alignment: every reader links both ways (core.alignment.extract.links)
    train_step: int = -1  # "Over training": the snapshot step shown (-1 = the latest, followed)
    diff_from: int = -1  # "Over training": step A of B − A, B the step shown (-1 = none)
    query: int = 0  # "Inside a head": the query token of the q·k view (its position)
    lines_all: bool = False  # "Inside a head": lines of every head of the layer, in colours
    lens: str = LENS_COLORS[0]  # "Logit lens": colour by the chosen word's "prob" or "rank"
    space_side: str = SIDES[0]  # "Where tokens live": the stack projected
    space_layer: str = "last"  # ... its layer: "last", "all" or a number (0 = the input)
    space_method: str = METHODS[0]  # ... "pca" or "umap"
    space_dims: int = DIMS[0]  # ... 2 or 3
    space_colour: str = COLOURS[0]  # ... what a point's colour shows
    space_sentences: int = SENTENCES  # ... validation sentences projected
    space_pick: str = ""  # ... the picked token, "SENTENCE:POSITION:LAYER" ("" = none)
    space_reads: str = READS[0]  # ... what the decoder reads: a reference or its translation

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> ViewState:
        """Read the URL's values; missing or malformed ones keep their defaults (the text
        fields a link carried past their limit are named in ``state.too_long``)."""
        state = cls()
        state.too_long = []  # not a field: never written back to the URL
        for f in fields(cls):
            raw = params.get(f.name)
            if raw is None:
                continue
            try:
                value = _parse(f.type, raw)
            except ValueError:
                continue
            setattr(state, f.name, value)
        state.beam = min(max(state.beam, BEAM_SIZES[0]), BEAM_SIZES[1])
        state.alpha = min(max(state.alpha, ALPHAS[0]), ALPHAS[1])
        state.max_len = min(max(state.max_len, MAX_LENS[0]), MAX_LENS[1])
        state.layer = min(max(state.layer, 0), MAX_INDEX)
        state.step = min(max(state.step, 0), MAX_INDEX)
        state.train_step = min(max(state.train_step, -1), MAX_TRAINING_STEP)
        state.diff_from = min(max(state.diff_from, -1), MAX_TRAINING_STEP)
        state.query = min(max(state.query, 0), MAX_INDEX)
        for name in (
            "sentence",
            "other_sentence",
            "model",
            "other",
            "ablate",
            "token",
            "method",
            "target_lang",
            "prompt",
            "corrupt",
            "patch_prefix",
            "patch_answer",
            "patch_wrong",
            "contrast_word",
            "section",
        ):
            if len(getattr(state, name)) > MAX_TEXT_CHARS:
                setattr(state, name, getattr(cls, name))
                state.too_long.append(name)
        state.section = OLD_SECTIONS.get(state.section, state.section)  # the picker checks it
        if len(state.reference) > MAX_REFERENCE_CHARS:
            state.reference = cls.reference
            state.too_long.append("reference")
        if len(state.target) > MAX_REFERENCE_CHARS:
            state.target = cls.target
            state.too_long.append("target")
        if state.forced not in ("A", "B"):
            state.forced = cls.forced
        if state.align not in (*ALIGN_MODES, WHOLE):  # whole: the section checks the model
            state.align = cls.align
        if state.lens not in LENS_COLORS:
            state.lens = cls.lens
        if state.kind not in KINDS:
            state.kind = cls.kind
        _check_space(state, cls)
        if state.contrast_method not in CONTRAST_METHODS:
            state.contrast_method = cls.contrast_method
        state.contrast_step = min(max(state.contrast_step, -1), MAX_INDEX)
        if state.patch_dir not in DIRECTIONS:
            state.patch_dir = cls.patch_dir
        if not (_is_index(state.head) or state.head in HEAD_AGGREGATES):
            state.head = cls.head
        return state

    def to_query(
        self, keys: Sequence[str] | None = None, owned: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The URL's values (of ``keys``, default all): the view's core always, others if set;
        a field ``owned`` by a section ({field: section key}) only while it is shown."""
        default, owned = ViewState(), owned or {}
        out = {}
        for f in fields(self):
            if keys is not None and f.name not in keys:
                continue
            if f.name in owned and self.section != owned[f.name]:
                continue  # the output step (method, mode) means something in one section only
            value = getattr(self, f.name)
            always = f.name in ("sentence", "model", "kind", "layer", "head")
            if always or value != getattr(default, f.name):
                out[f.name] = str(int(value) if isinstance(value, bool) else value)
        return out

    def settings(self) -> DecodeSettings:
        """The decoding settings of this state."""
        return DecodeSettings(
            self.beam, self.alpha, self.max_len, target_lang=self.target_lang, prompt=self.prompt
        )

    def set_sentence(self, sentence: str) -> None:
        """Show ``sentence``; a reference or target given for another sentence is dropped."""
        if sentence != self.sentence:
            self.sentence, self.reference, self.target = sentence, "", ""

    def forced_reference(self) -> str:
        """The reference to force: the one given, else the d2l book's for the sentence, else ""."""
        return self.reference or self._book_reference()

    def set_reference(self, reference: str) -> None:
        """Force ``reference`` from now on (kept as "" when it is the book's, the default)."""
        self.reference = "" if reference == self._book_reference() else reference

    def _book_reference(self) -> str:
        """The d2l book's reference of the sentence ("" if it is not one of the chapter's)."""
        return BOOK_REFERENCES.get(" ".join(self.sentence.lower().split()), "")


def _check_space(state: ViewState, cls) -> None:
    """The projection's settings back to their defaults where the URL's are not among the
    choices; the sentence count clamped."""
    for name, choices in (
        ("space_side", SIDES),
        ("space_method", METHODS),
        ("space_dims", DIMS),
        ("space_colour", COLOURS),
        ("space_reads", READS),
    ):
        if getattr(state, name) not in choices:
            setattr(state, name, getattr(cls, name))
    if state.space_layer not in ("last", "all") and not _is_index(state.space_layer):
        state.space_layer = cls.space_layer
    parts = state.space_pick.split(":")
    if state.space_pick and not (len(parts) == 3 and all(map(_is_index, parts))):
        state.space_pick = cls.space_pick
    asked = min(max(state.space_sentences, 1), MAX_SENTENCES)  # one of the page's choices:
    state.space_sentences = min(n for n in SENTENCE_CHOICES if n >= asked)  # at least as many


def _is_index(text: str) -> bool:
    """True for a head number as a URL may write it: 1 to 4 ASCII digits ("²" is not one)."""
    return text.isascii() and text.isdigit() and len(text) <= 4


def _parse(type_name, raw: str):
    """Parse one URL value for a ViewState field type (raises ValueError)."""
    name = type_name if isinstance(type_name, str) else type_name.__name__
    if name == "int":
        return int(raw)
    if name == "float":
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
        return value
    if name == "bool":
        return raw.lower() in ("1", "true", "yes", "on")
    return str(raw)


def clamp_view(state: ViewState, maps: SentenceMaps) -> ViewState:
    """The state with layer, head and output step moved inside what this model and kind have."""
    layers = maps.layers(state.kind)
    state.layer = min(state.layer, layers - 1)
    state.step = min(state.step, max(len(maps.output_tokens) - 1, 0))
    if state.head not in head_options(state.kind, maps.heads):
        state.head = "0" if not _is_index(state.head) else str(maps.heads - 1)
    return state
