"""Alignment section: what training a head to align changed, beside a model trained without."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from core.alignment.extract import WHOLE, modes
from core.alignment.grid import AlignmentGrid
from core.alignment.supervision_effect import EffectRow, supervision_effect
from core.attention.head_stats import supervised_head
from core.figures import alignment_grid as grid_figs
from core.model.checkpoints import CheckpointError
from core.model.interface import TranslationModel
from core.runs import catalogue
from pages.ui.attention import cached_alignment as cached
from pages.ui.attention.gold_sets import GoldSet, within_bounds
from pages.ui.attention.inputs import SectionInputs
from pages.ui.heavy_work import TimeLimit
from pages.ui.model_picker import load_model, model_entries
from pages.ui.text import code, md, spreadsheet_safe
from pages.ui.view_widgets import keep_choice, seed_choice

PLAIN_KEY = "al_plain"  # widget: the model trained without supervision to compare with
SUPERVISION_WORDS = (
    "Garg et al. (2019) train one cross-attention head toward word alignments beside the "
    "translation loss. Below, the head this model was trained to align and each model's best "
    "reader, on the same gold set, beside a model trained without supervision; **change** is "
    "this model's AER minus the plain one's (negative: supervision helped)."
)


def supervision_panel(
    page: SectionInputs, gold: GoldSet, grid: AlignmentGrid, scored: Callable, both: bool = False
):
    """For a model with a head trained to align: that head and the best reader beside a plain
    model's (``scored``: a model's grid, read as ``grid`` was; ``both``: both ways). For the
    plain shipped model: where the supervised one is."""
    found = supervised_head(page.lm.meta)
    if found is None:
        point_to_supervised(page)
        return
    layer, head, what = found
    st.subheader(f"What supervision changed: cross layer {layer} head {head}")
    st.caption(f"{SUPERVISION_WORDS} This model's head: {md(what)}.")
    plain = pick_plain(page)
    if plain is None:
        return
    try:
        plain_lm = load_model(plain.path, plain.mtime)
        plain_grid = scored(plain, plain_lm, gold)
        rows = None if plain_grid is None else supervision_effect(plain_grid, grid, layer, head)
        whole = None if rows is None else whole_row(page, plain, plain_lm, gold, both)
        rows = rows if whole is None else [*rows, whole]
    except (CheckpointError, ValueError, RuntimeError, IndexError, TimeLimit) as e:
        st.error(md(f"{plain.key} cannot be compared: {' '.join(str(e).split())}"))
        return
    if rows is None:
        return
    number = st.column_config.NumberColumn(format="%.3f")
    st.dataframe(
        spreadsheet_safe(grid_figs.effect_table(rows)),
        hide_index=True,
        column_config={c: number for c in ("AER plain", "AER this model", "change")},
    )


def whole_row(
    page: SectionInputs,
    plain: catalogue.ModelEntry,
    plain_lm: TranslationModel,
    gold: GoldSet,
    both: bool,
) -> EffectRow | None:
    """For a head trained with the whole target visible: that head read so in both models
    (cached for every session; computed within the server's bounds and in its heavy slot),
    else None."""
    if WHOLE not in modes(page.lm):  # a head trained in the causal pass
        return None
    args = (page.lm, page.entry.path, page.entry.mtime, plain_lm, plain.path, plain.mtime)
    args = (*args, gold.key, gold.pairs, gold.links, both)
    found, row = cached.whole_target_row.peek(*args)
    return row if found else within_bounds(page.lm, gold, lambda: cached.whole_target_row(*args))


def pick_plain(page: SectionInputs) -> catalogue.ModelEntry | None:
    """The model to compare with (widget ``al_plain``): the studio's own models but this one,
    the plain shipped model first; None, with a line, when there is none."""
    entries = model_entries()
    others = [
        e
        for e in entries
        if e.usable and e.origin != catalogue.HF_ORIGIN and e.key != page.entry.key
    ]
    default = catalogue.shipped_entry(others, catalogue.SHIPPED_NAME)
    if default is not None:
        others = [default] + [e for e in others if e is not default]
    if not others:
        st.info("No other model of the studio's own is here to compare with.")
        return None
    by_key = {e.key: e for e in others}
    seed_choice(page.state, "plain", PLAIN_KEY, list(by_key))
    key = st.selectbox(
        "Compare with a model trained without supervision",
        list(by_key),
        key=PLAIN_KEY,
        format_func=lambda k: by_key[k].label,
    )
    return by_key[keep_choice(page.state, "plain", key, list(by_key))]


def point_to_supervised(page: SectionInputs) -> None:
    """Under the plain shipped model: the shipped model with a head trained to align."""
    if page.entry.origin != "shipped model":
        return
    aligned = catalogue.shipped_entry(model_entries(), catalogue.ALIGNED_NAME)
    if aligned is None or aligned.key == page.entry.key:
        return
    st.caption(
        f"{code(aligned.key)}, shipped beside this model, was trained the same way with one "
        "cross-attention head trained to align (Garg et al. 2019): pick it as the model above "
        "to see what supervision changes, beside this model."
    )
