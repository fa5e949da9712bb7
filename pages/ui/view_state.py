"""What the Translate and Attention pages show, as it travels in the URL.

One flat state: the model, the sentence and decoding, the view (kind, layer, head), and each
Attention section's own fields. Which section writes which fields is that section's row of
``pages.ui.attention.sections.SECTIONS`` (``to_query``'s ``owned``): a field of one section
travels in the URL only while that section is shown. The choices a field is checked against
are the library's own (``core``), never copies. What a link asked for is kept until the page
has checked it (``asked``), with why a value was replaced (``why``): ``refused`` lists those
the page shows otherwise, for one note.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from core.alignment.extract import MODES as ALIGN_MODES
from core.alignment.extract import WHOLE
from core.attention.importance import SENTENCES as IMPORTANCE_SENTENCES
from core.attention.kinds import KIND_NAMES, KINDS
from core.attention.logit_lens import LENS_COLORS
from core.attention.maps import HEAD_AGGREGATES, head_options
from core.attention.patch_methods import METHODS as PATCH_METHODS
from core.attention.patching import DIRECTIONS
from core.attention.patching import PICKS as PATCH_PICKS
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
from core.attention.token_pick import CLICK_AXES
from core.attention.trajectories import METRICS as TRAJECTORY_METRICS
from core.attribution.contrast import CONTRAST_METHODS
from core.attribution.faithfulness import SENTENCES as FAITHFULNESS_SENTENCES
from core.attribution.gradients import (
    AGGREGATIONS,
    BASELINES,
    CONTRAST_WORDS,
    DEFAULT_CHOICES,
    MAX_SAMPLES,
    MAX_STEPS,
    NORMALISATIONS,
    PLAIN_FUNCTIONS,
    RULES,
    GradientChoices,
)
from core.corpus.text import D2L_TEST_PAIRS
from core.model.checked_translation import DEFAULT_SENTENCE, EXAMPLES
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
OVERVIEWS = ("heatmaps", "lines")  # the Maps' overview: heat maps, or bertviz's model view
GOLD_SETS = ("shipped", "held-out", "upload")  # the gold sets Alignment scores readers on
TRAJECTORY_BASES = ("probes", "validation")  # what "Over training" measures every head on
PRECISIONS = ("", "float32", "bfloat16")  # head importance's passes ("" = this machine's choice)
RANGES = {  # field -> (least, most): a link's value outside is moved to the nearer end
    "beam": BEAM_SIZES,
    "alpha": ALPHAS,
    "max_len": MAX_LENS,
    "layer": (0, MAX_INDEX),
    "step": (0, MAX_INDEX),
    "query": (0, MAX_INDEX),
    "contrast_step": (-1, MAX_INDEX),
    "dla_step": (-1, MAX_INDEX),
    "train_step": (-1, MAX_TRAINING_STEP),
    "diff_from": (-1, MAX_TRAINING_STEP),
    "ig_steps": (2, MAX_STEPS),
    "samples": (1, MAX_SAMPLES),
}
CHOICES = {  # field -> the values it may take: another falls back to the field's default
    "forced": ("A", "B"),
    "align": (*ALIGN_MODES, WHOLE),  # whole: the section checks the model
    "lens": LENS_COLORS,
    "kind": KINDS,
    "contrast_method": CONTRAST_METHODS,
    "contrast_function": tuple(CONTRAST_WORDS),
    "patch_dir": DIRECTIONS,
    "patch_method": PATCH_METHODS,
    "patch_sites": tuple(PATCH_PICKS),
    "space_side": SIDES,
    "space_method": METHODS,
    "space_dims": DIMS,
    "space_colour": COLOURS,
    "space_reads": READS,
    "overview": OVERVIEWS,
    "click": CLICK_AXES,
    "baseline": BASELINES,
    "rule": RULES,
    "function": PLAIN_FUNCTIONS,
    "aggregation": AGGREGATIONS,
    "normalisation": NORMALISATIONS,
    "gold": GOLD_SETS,
    "traj_basis": TRAJECTORY_BASES,
    "traj_metric": ("", *TRAJECTORY_METRICS),
    "precision": PRECISIONS,
}
LONG_TEXT = {"reference": MAX_REFERENCE_CHARS, "target": MAX_REFERENCE_CHARS}  # else MAX_TEXT_CHARS


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
    stretch: bool = False  # the colour scale topped at the 99th percentile instead of 1
    section: str = "maps"  # what the Attention page shows (a key of its SECTIONS)
    step: int = 0  # output step of the decoding playback
    ablate: str = ""  # heads removed, "KIND:LAYER:HEAD,..." (core.ablate's spec)
    importance_sentences: int = IMPORTANCE_SENTENCES  # "Remove heads": head importance's sample
    precision: str = ""  # ... its passes' precision ("" = this machine's choice)
    other: str = ""  # the compared model's key ("" = none)
    other_sentence: str = ""  # the compared sentence ("" = none)
    forced: str = "A"  # whose output both decoders read when two models' outputs differ
    token: str = ""  # selected token, "q<i>" (query row) or "k<j>" (key column)
    click: str = CLICK_AXES[0]  # "Maps": a click on a cell outlines its "query" row or "key" column
    overview: str = OVERVIEWS[0]  # ... every head as "heatmaps" or "lines" (bertviz's model view)
    all_layers: bool = False  # ... (and Compare's differences) every layer of a large model
    reference: str = ""  # French reference of `sentence` to force ("" = the d2l book's, if any)
    target: str = ""  # a translation the user typed, explained instead of the model's own
    corrupt: str = ""  # activation patching: the sentence patched into ("" = none yet)
    patch_dir: str = "denoise"  # ... "denoise" (clean into corrupted) or "noise"
    patch_ask: bool = False  # ... the user chooses the step (prefix) and the answers
    patch_prefix: str = ""  # ... the target words before that step
    patch_answer: str = ""  # ... the clean run's answer word ("" = its most likely)
    patch_wrong: str = ""  # ... the corrupted run's answer word ("" = its most likely)
    patch_method: str = "activation"  # ... "activation", "attribution" (estimate) or "path"
    patch_receivers: str = "logits"  # ... path patching's receivers: logits, or heads L.H,...
    patch_freeze_mlps: bool = False  # ... path patching freezes the MLPs too (else recomputed)
    patch_sites: str = "heads_stream"  # ... what activation patching patches (patching.PICKS)
    method: str = "alti"  # attribution method, one of core.attribution.methods.METHODS
    function: str = DEFAULT_CHOICES.function  # the gradient methods: what is explained
    aggregation: str = DEFAULT_CHOICES.aggregation  # ... a token's score over its embedding
    normalisation: str = DEFAULT_CHOICES.normalisation  # ... "row" (rows sum to 1) or "none"
    baseline: str = DEFAULT_CHOICES.baseline  # integrated gradients: where the integral starts
    ig_steps: int = DEFAULT_CHOICES.steps  # ... its integration points
    rule: str = DEFAULT_CHOICES.rule  # ... how the integral is approximated
    keep_specials: bool = DEFAULT_CHOICES.keep_specials  # ... specials keep their embedding
    samples: int = DEFAULT_CHOICES.samples  # ... random baselines averaged
    faith_sentences: int = FAITHFULNESS_SENTENCES  # faithfulness: validation sentences
    faith_slow: bool = False  # ... integrated gradients measured too
    contrast_step: int = -1  # "Why this word": the output step (-1 = the first with another)
    contrast_word: str = ""  # ... the alternative word ("" = the step's likeliest other)
    contrast_method: str = CONTRAST_METHODS[0]  # ... the contrastive method
    contrast_function: str = "log-prob"  # ... the difference of log-probabilities or of "prob"
    contrast_source: str = ""  # step scores: P-CXMI's other source sentence ("" = none)
    source_spans: str = ""  # attribution: source spans read as one, "a:b,c:d" ("" = none)
    target_spans: str = ""  # ... output spans read as one ("" = none)
    align: str = ALIGN_MODES[0]  # alignment mode: "awo" (the step that predicts), "awi", "whole"
    both: bool = False  # alignment: every reader links both ways (core.alignment.extract.links)
    align_all: bool = False  # ... the mean of every layer and head instead of the view's
    gold: str = GOLD_SETS[0]  # ... the gold set the readers are scored on
    reverse: str = ""  # ... the opposite direction's model combined (a key, "" = the first offered)
    plain: str = ""  # ... the model without supervision shown beside (a key, "" = the first)
    train_step: int = -1  # "Over training": the snapshot step shown (-1 = the latest, followed)
    diff_from: int = -1  # "Over training": step A of B − A, B the step shown (-1 = none)
    probe: str = ""  # ... the probe sentence ("" = the sentence above if a probe, else the first)
    traj_basis: str = TRAJECTORY_BASES[0]  # ... what every head is measured on
    traj_metric: str = ""  # ... the number drawn ("" = the first available)
    query: int = 0  # "Inside a head": the query token of the q·k view (its position)
    lines_all: bool = False  # "Inside a head": lines of every head of the layer, in colours
    lens: str = LENS_COLORS[0]  # "Logit lens": colour by the chosen word's "prob" or "rank"
    dla_step: int = -1  # "Direct logit attribution": the output step (-1 = the last)
    dla_answer: str = ""  # ... the word whose logit is taken apart ("" = the word written)
    dla_wrong: str = ""  # ... the word whose logit is subtracted ("" = none)
    space_side: str = SIDES[0]  # "Where tokens live": the stack projected
    space_layer: str = "last"  # ... its layer: "last", "all" or a number (0 = the input)
    space_method: str = METHODS[0]  # ... "pca" or "umap"
    space_dims: int = DIMS[0]  # ... 2 or 3
    space_colour: str = COLOURS[0]  # ... what a point's colour shows
    space_sentences: int = SENTENCES  # ... validation sentences projected
    space_pick: str = ""  # ... the picked token, "SENTENCE:POSITION:LAYER" ("" = none)
    space_reads: str = READS[0]  # ... what the decoder reads: a reference or its translation

    def __post_init__(self) -> None:
        """No link read: nothing asked (``asked`` and ``why`` are not fields: never in a URL)."""
        self.asked: dict[str, str] = {}  # field -> the link's value, as written, not yet checked
        self.why: dict[str, str] = {}  # field -> why the link's value is not the one shown

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> ViewState:
        """Read the URL's values; missing or malformed ones keep their defaults, out of range
        ones move inside it. What the link asked is kept in ``asked`` (and why a value was
        replaced in ``why``) for the note that names what it did not get (``refused``)."""
        state = cls()
        for f in fields(cls):
            raw = params.get(f.name)
            if raw is None:
                continue
            state.asked[f.name] = OLD_SECTIONS.get(raw, raw) if f.name == "section" else raw
            try:
                setattr(state, f.name, _parse(f.type, state.asked[f.name]))
            except ValueError:
                state.why[f.name] = f"not {_TYPE_WORDS[_type_name(f.type)]}"
        for name, (least, most) in RANGES.items():
            state.keep_within(name, least, most)
        for name, choices in CHOICES.items():
            if getattr(state, name) not in choices:  # ("" is the default: not listed)
                state.drop(name, f"not one of {', '.join(str(c) for c in choices if c != '')}")
        for f in fields(cls):
            value, most = getattr(state, f.name), LONG_TEXT.get(f.name, MAX_TEXT_CHARS)
            if isinstance(value, str) and len(value) > most:
                state.drop(
                    f.name,
                    f"{len(value):,} characters, too long for a link (at most {most:,}): type "
                    "it in the box instead",
                )
        if not (_is_index(state.head) or state.head in HEAD_AGGREGATES):
            state.drop("head", f"not a head number nor one of {', '.join(HEAD_AGGREGATES)}")
        _check_space(state)
        return state

    def keep_within(self, name: str, least, most) -> None:
        """Field ``name`` moved inside [least, most] (the link's note says why)."""
        value = getattr(self, name)
        if not least <= value <= most:
            setattr(self, name, min(max(value, least), most))
            self.why[name] = f"from {least:,} to {most:,}"

    def drop(self, name: str, why: str) -> None:
        """Field ``name`` back to its default (the link's note says ``why``)."""
        setattr(self, name, getattr(ViewState, name))
        self.why[name] = why

    def granted(self, name: str) -> None:
        """The link's value of ``name`` is shown, though written another way: not refused."""
        self.asked.pop(name, None)

    def refused(self, keys: Sequence[str]) -> list[tuple[str, str, str, str]]:
        """(field, asked, shown, why) of each of ``keys`` the link asked for and this run
        shows otherwise; those keys are checked once (later runs no longer ask)."""
        out = []
        for name in [k for k in keys if k in self.asked]:
            raw, shown = self.asked.pop(name), self._shown(name)
            try:
                same = _parse(_field_type(name), raw) == shown
            except ValueError:
                same = False
            if name == "sentence" and raw in EXAMPLES and shown in EXAMPLES:
                same = True  # another model's example sentence: this model's own is shown
            if not same:
                written = str(int(shown) if isinstance(shown, bool) else shown)
                out.append((name, raw, written, self.why.get(name, "")))
        return out

    def _shown(self, name: str):
        """The value of field ``name`` this run shows (a reference: the book's if none)."""
        return self.forced_reference() if name == "reference" else getattr(self, name)

    def gradient_choices(self) -> GradientChoices:
        """What the gradient methods compute, as this state chose it."""
        return GradientChoices(
            baseline=self.baseline,
            keep_specials=self.keep_specials,
            steps=self.ig_steps,
            rule=self.rule,
            aggregation=self.aggregation,
            function=self.function,
            normalisation=self.normalisation,
            samples=self.samples,
        )

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


def _check_space(state: ViewState) -> None:
    """The projection's layer and picked token back to their defaults where the URL's are not
    written as they must be; the sentence count up to one of the page's choices."""
    if state.space_layer not in ("last", "all") and not _is_index(state.space_layer):
        state.drop("space_layer", "not last, all nor a layer number")
    parts = state.space_pick.split(":")
    if state.space_pick and not (len(parts) == 3 and all(map(_is_index, parts))):
        state.drop("space_pick", "not SENTENCE:POSITION:LAYER")
    asked = min(max(state.space_sentences, 1), MAX_SENTENCES)  # one of the page's choices:
    state.space_sentences = min(n for n in SENTENCE_CHOICES if n >= asked)  # at least as many
    state.why["space_sentences"] = f"one of {', '.join(map(str, SENTENCE_CHOICES))}"


def _is_index(text: str) -> bool:
    """True for a head number as a URL may write it: 1 to 4 ASCII digits ("²" is not one)."""
    return text.isascii() and text.isdigit() and len(text) <= 4


_TYPE_WORDS = {"int": "a whole number", "float": "a number", "bool": "1 or 0", "str": "text"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _type_name(type_name) -> str:
    """A field's type as its name ("int", "float", "bool", "str")."""
    return type_name if isinstance(type_name, str) else type_name.__name__


def _field_type(name: str) -> str:
    """The type name of ViewState's field ``name``."""
    return next(_type_name(f.type) for f in fields(ViewState) if f.name == name)


def _parse(type_name, raw: str):
    """Parse one URL value for a ViewState field type (raises ValueError)."""
    name = _type_name(type_name)
    if name == "int":
        return int(raw)
    if name == "float":
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
        return value
    if name == "bool":
        if raw.lower() not in (*_TRUE, *_FALSE):
            raise ValueError(raw)
        return raw.lower() in _TRUE
    return str(raw)


def clamp_view(state: ViewState, maps: SentenceMaps) -> ViewState:
    """The state with layer, head and output step moved inside what this model and kind have
    (why, for the link's note)."""
    if state.kind not in maps.drawn_kinds and maps.drawn_kinds:  # no source: no cross map
        asked = KIND_NAMES[state.kind].lower()
        state.kind, state.why["kind"] = maps.drawn_kinds[0], f"this model has no {asked} map"
    layers, kind = maps.layers(state.kind), f"{KIND_NAMES[state.kind].lower()}-attention"
    last = max(len(maps.output_tokens) - 1, 0)
    for name, most, why in (
        ("layer", layers - 1, f"this model's {kind} has layers 0 to {layers - 1}"),
        ("step", last, f"this translation has output steps 0 to {last}"),
    ):
        asked = _asked_number(state, name)  # -1 was moved to 0: this model's range says why
        if getattr(state, name) > most or (asked is not None and not 0 <= asked <= most):
            setattr(state, name, min(getattr(state, name), most))
            state.why[name] = why
    heads = head_options(state.kind, maps.heads)
    if state.head not in heads or "head" in state.why:  # (head=-2 fell back to 0 when read)
        more = ", ".join(h for h in heads if not _is_index(h))
        state.why["head"] = f"this model's {kind} has heads 0 to {maps.heads - 1}, {more}"
        if state.head not in heads:
            state.head = "0" if not _is_index(state.head) else str(maps.heads - 1)
    return state


def _asked_number(state: ViewState, name: str) -> int | None:
    """The whole number a link asked for field ``name``, or None (none asked, or not one)."""
    try:
        return int(state.asked[name])
    except (KeyError, ValueError):
        return None
