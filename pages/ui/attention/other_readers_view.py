"""Alignment section: readers beyond one head of cross-attention (an attribution method, the
stacks' states, both directions symmetrised), scored on the gold set above."""

from __future__ import annotations

import streamlit as st

from core.alignment.symmetrised import direction_problem
from core.figures import alignment_grid as grid_figs
from core.model.checkpoints import CheckpointError
from core.runs import catalogue
from core.runs.catalogue import ModelEntry
from pages.ui.attention import cached_alignment as cached
from pages.ui.attention.gold_sets import GoldSet, within_bounds
from pages.ui.attention.inputs import SectionInputs
from pages.ui.heavy_work import TimeLimit
from pages.ui.model_picker import load_model, model_entries
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_widgets import keep_choice, seed_choice

REVERSE_KEY = "al_reverse"  # widget: a model of the opposite direction
RUN_KEY = "al_other_run"  # button: score the readers
METHODS = ("alti",)  # the attribution method the page scores (ALTI+: seconds, not minutes)
NONE = "(none)"
OTHER_WORDS = (
    "The heads above are one way to read alignments. Three more, scored on the same gold set: "
    "**attribution** (each French word linked to the English word that contributes most to "
    "it by ALTI+, as Ferrando et al. do; `python -m core.align --method integrated-gradients` "
    "adds integrated gradients, minutes on a CPU); the **stacks' states** (SimAlign's argmax "
    "and itermax over the cosine similarity of the encoder's and the decoder's states after "
    "each layer; the best of each shown; `--similarity` prints every one); and **both "
    "directions**: with a French→English model picked below, each model's best reader "
    "combined as a statistical aligner's two directions are (intersection, union, "
    "grow-diag-final-and; `--reverse`)."
)


def other_readers_panel(page: SectionInputs, gold: GoldSet, both: bool = False) -> None:
    """Pick a model of the opposite direction, score the readers (a button; cached), show them
    (``both``: the two directions' heads read both ways, as the grid above)."""
    st.subheader("Readers beyond one head")
    st.caption(OTHER_WORDS)
    reverse = pick_reverse(page)
    rev_lm = None
    if reverse is not None:
        try:
            rev_lm = load_model(reverse.path, reverse.mtime)
        except (CheckpointError, OSError, ValueError) as e:
            st.error(md(f"{reverse.key} cannot be opened: {' '.join(str(e).split())}"))
            return
        if problem := direction_problem(page.lm, rev_lm):
            st.info(md(problem))
            rev_lm = reverse = None
    methods = tuple(m for m in METHODS if page.lm.supports(m) is None)
    where = (reverse.path, reverse.mtime) if reverse else (None, None)
    key = gold.key + page.lm.view_key
    args = (page.lm, page.entry.path, page.entry.mtime, key, gold.pairs, gold.links)
    args = (*args, methods, rev_lm, *where, both)
    found, rows = cached.other_readers.peek(*args)
    if not found:
        if not st.button("Score these readers", key=RUN_KEY):
            return
        rows = computed(page, gold, args)
    if rows is not None:
        show(rows)


def pick_reverse(page: SectionInputs) -> ModelEntry | None:
    """A model to symmetrise with (widget ``al_reverse``): a translator of the opposite
    direction (``catalogue.reverse_entries``), a shipped one chosen first; None for none (and
    only that where none is known to translate the other way)."""
    languages = page.lm.languages
    others = {e.key: e for e in catalogue.reverse_entries(model_entries(), page.entry, languages)}
    shipped = [k for k, e in others.items() if e.origin == "shipped model"]  # chosen first
    keys = [*shipped[:1], NONE, *(k for k in others if k not in shipped[:1])]
    if not others:
        st.caption(md(reverse_missing(languages)))
    seed_choice(page.state, "reverse", REVERSE_KEY, keys)
    choice = st.selectbox(
        "A model of the opposite direction, to combine both",
        keys,
        key=REVERSE_KEY,
        format_func=lambda k: k if k == NONE else others[k].label,
    )
    return others.get(keep_choice(page.state, "reverse", choice, keys))


def reverse_missing(languages: tuple[str, str]) -> str:
    """Why the picker of a model of the opposite direction offers none, in one line."""
    if tuple(languages) == catalogue.UNKNOWN_LANGUAGES:
        return "This model's files do not say its languages: no model is offered to combine with."
    src, tgt = languages
    return f"No model here translates {tgt}→{src}, the other way round of this one."


def computed(page: SectionInputs, gold: GoldSet, args: tuple) -> list[dict] | None:
    """The rows, computed now (``within_bounds``), or None after a one-line message."""

    def rows() -> list[dict]:
        with st.spinner(f"Scoring the readers on {len(gold.pairs)} pairs…"):
            return cached.other_readers(*args)

    try:
        return within_bounds(page.lm, gold, rows)
    except (TimeLimit, ValueError, RuntimeError, IndexError) as e:
        st.error(md(f"The readers were not scored: {' '.join(str(e).split())}"))
        return None


def show(rows: list[dict]) -> None:
    """The table, best first within each kind."""
    table = grid_figs.other_readers_table(rows)
    number = st.column_config.NumberColumn(format="%.3f")
    st.dataframe(
        spreadsheet_safe(table),
        hide_index=True,
        column_config={c: number for c in ("AER", "precision", "recall")},
    )
