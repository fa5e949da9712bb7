"""The Attention page's sections: each key's label, the view that draws it, the fields of
the view state only it writes (they travel in the URL while it is shown), and the picker. A
new section is one line here (and its view)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from core.model.interface import TranslationModel
from pages.ui.attention import (
    ablation_view,
    alignment_view,
    attribution_view,
    comparison_view,
    head_scores_view,
    inside_head_view,
    logit_attribution_view,
    logit_lens_view,
    maps_view,
    over_training_view,
    patching_view,
    playback_view,
    projector_view,
)
from pages.ui.attention.alignment_gold_view import open_alignment_on_best
from pages.ui.attention.inputs import SectionInputs
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default


class Section(NamedTuple):
    """One section of the Attention page: its label, the view that draws it, its fields."""

    label: str  # shown on the "Show" radio
    draw: Callable[[SectionInputs], None]
    reads_view: bool = True  # whether it reads the kind, layer and head above it
    fields: tuple[str, ...] = ()  # the ViewState fields only it writes


GRADIENTS = ("function", "aggregation", "normalisation", "baseline", "ig_steps", "rule")
GRADIENTS += ("keep_specials", "samples")  # the gradient methods' choices (GradientChoices)
ATTRIBUTION = ("method", *GRADIENTS, "faith_sentences", "faith_slow")
ATTRIBUTION += ("contrast_step", "contrast_word", "contrast_method", "contrast_function")
ATTRIBUTION += ("contrast_source", "source_spans", "target_spans")
ALIGNMENT = ("align", "both", "align_all", "gold", "reverse", "plain")
PATCH = ("corrupt", "patch_dir", "patch_ask", "patch_prefix", "patch_answer", "patch_wrong")
PATCH += ("patch_method", "patch_receivers", "patch_freeze_mlps", "patch_sites")
PROJECT = ("space_side", "space_layer", "space_method", "space_dims", "space_colour")
SECTIONS = {  # key (the URL's ``section``) -> section
    "maps": Section("Maps", maps_view.maps_section, fields=("click", "overview")),
    "playback": Section("Decoding playback", playback_view.playback_section, fields=("step",)),
    "training": Section(
        "Over training",
        over_training_view.training_section,
        fields=("train_step", "diff_from", "probe", "traj_basis", "traj_metric"),
    ),
    "ablation": Section(
        "Remove heads",
        ablation_view.ablation_section,
        fields=("importance_sentences", "precision"),
    ),
    "compare": Section("Compare", comparison_view.comparison_section),
    "attribution": Section("Attribution", attribution_view.attribution_section, fields=ATTRIBUTION),
    "alignment": Section("Alignment", alignment_view.alignment_section, fields=ALIGNMENT),
    "inside": Section(
        "Inside a head", inside_head_view.inside_head_section, fields=("query", "lines_all")
    ),
    "lens": Section("Logit lens", logit_lens_view.logit_lens_section, False, ("lens",)),
    "logit_attribution": Section(
        "Direct logit attribution",
        logit_attribution_view.logit_attribution_section,
        False,
        ("dla_step", "dla_answer", "dla_wrong"),
    ),
    "head_scores": Section("Head scores", head_scores_view.head_scores_section, False),
    "patch": Section("Patching", patching_view.patching_section, False, PATCH),
    "project": Section(
        "Where tokens live",
        projector_view.projector_section,
        False,
        (*PROJECT, "space_sentences", "space_pick", "space_reads"),
    ),
}
SECTION_KEYS = tuple(SECTIONS)  # in the picker's order
SECTION_FIELDS = {name: key for key, s in SECTIONS.items() for name in s.fields}  # -> its section


def known_section(state: ViewState) -> str:
    """The state's section, or the first one when the URL named none of them."""
    if state.section not in SECTIONS:
        state.drop("section", f"not one of {', '.join(SECTION_KEYS)}")
    return state.section


def offered(lm: TranslationModel) -> tuple[str, ...]:
    """The sections the Show radio offers for ``lm``: those its capability table allows
    (``supports``), in the picker's order."""
    return tuple(key for key in SECTION_KEYS if lm.supports(key) is None)


def offered_section(state: ViewState, lm: TranslationModel) -> str:
    """The state's section where ``lm`` can show it; else the first one, the link's note saying
    why (the table's one line)."""
    if problem := lm.supports(known_section(state)):
        state.drop("section", problem)
    return state.section


def coming_section(state: ViewState, lm: TranslationModel) -> Section:
    """The section this run will draw (the picker's new value on a click), before the picker."""
    key = st.session_state.get("at_section")
    return SECTIONS[key if key in offered(lm) else offered_section(state, lm)]


def _opened() -> None:
    """The section picker's callback: Alignment opens on the best reader."""
    if st.session_state.get("at_section") == "alignment":
        open_alignment_on_best()


def pick_section(state: ViewState, lm: TranslationModel) -> Section:
    """The "Show" radio (widget ``at_section``) over the sections ``lm`` can show; kept in the
    view state."""
    options = offered(lm)
    widget_default("at_section", offered_section(state, lm), options)
    state.section = st.radio(
        "Show",
        options,
        key="at_section",
        horizontal=True,
        format_func=lambda key: SECTIONS[key].label,
        on_change=_opened,
    )
    return SECTIONS[state.section]
