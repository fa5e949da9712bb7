"""Alignment section, the gold set: every reader's AER, the best reader, a statistical aligner."""

from __future__ import annotations

import streamlit as st

from core.alignment.extract import mode_label
from core.alignment.gold import GoldError
from core.alignment.grid import AlignmentGrid, GridRow
from core.attention.maps import export_name
from core.figures import alignment_grid as grid_figs
from core.figures.attribution import PANEL_PX
from core.model.interface import TranslationModel
from core.runs.catalogue import ModelEntry
from pages.ui.attention.cached_alignment import alignment_grid
from pages.ui.attention.gold_sets import (
    MAX_GOLD_BYTES,
    REFERENCE,
    GoldSet,
    held_out_set,
    reference_score,
    shipped_gold,
    uploaded_gold,
    within_bounds,
)
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.other_readers_view import other_readers_panel
from pages.ui.attention.supervision_view import supervision_panel
from pages.ui.charts import chart
from pages.ui.heavy_work import TimeLimit
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_state import GOLD_SETS, ViewState
from pages.ui.view_widgets import widget_default

SHIPPED, HELD_OUT, UPLOAD = GOLD_SETS
BOTH_WAYS_KEY = "al_both"  # widget: every reader links both ways (extract.links)
OPEN_BEST = "al_open_best"  # session flag: this run opens Alignment on the best reader
OPEN_WHEN_SCORED = "al_open_scored"  # session flag: ... once the gold panel has scored it
SCORED_BEST = "al_scored_best"  # the best reader the gold panel scored, for the next run
BEST_NOTE = "al_best_note"  # what the section says about the reader it opened on
SEEN_KEY = "al_seen_view"  # (model, layer, head) of the view when Alignment last read it
AER_WORDS = (
    "Every reader (each decoder layer's heads and their mean, and the mean of all layers, in "
    "each mode the model is read in) links the words of each gold pair; its links are scored "
    "against links a person made. **AER** (alignment error rate, Och & Ney 2003) = "
    "1 − (|A∩S| + |A∩P|) / (|A| + |S|), with A the reader's links, S the sure and P the "
    "possible gold links: 0 is perfect, lower is better. **Precision**: the share of the "
    "reader's links that are gold (sure or possible); **recall**: the share of the sure links "
    "the reader found."
)
FORMATS = (
    "Pairs: one `english tokens ||| french tokens` line per pair, tokenized as the model "
    "reads them. Gold: one line per pair of Pharaoh links, `i-j` sure and `ipj` possible, i "
    "the English and j the French word, counted from 0 (tick 1-indexed for files counted "
    f"from 1, such as the Hansards set). At most {MAX_GOLD_BYTES // 2**20} MB each."
)


def gold_panel(page: SectionInputs) -> None:
    """Pick a gold set, score every reader on it (cached), show the grid, the best, the table."""
    st.subheader("Which head aligns words? AER on a gold set")
    st.caption(AER_WORDS)
    gold = pick_gold(page.state)
    if gold is None:
        return
    opening = st.session_state.pop(OPEN_WHEN_SCORED, False)  # asked once: now or never
    try:
        grid = scored(page.entry, page.lm, gold)
    except (GoldError, ValueError, RuntimeError, IndexError) as e:
        st.error(md(f"The readers cannot be scored on {gold.name}: {' '.join(str(e).split())}"))
        return
    if grid is not None:
        if opening and gold.reference == REFERENCE.name:  # the shipped set, scored just now
            open_when_scored(grid, gold)
        show_grid(grid, gold, page.state)
        supervision_panel(page, gold, grid, scored, both_ways())
        other_readers_panel(page, gold, both_ways())


def scored(entry: ModelEntry, lm: TranslationModel, gold: GoldSet) -> AlignmentGrid | None:
    """Every reader's AER on a gold set: cached for every session; computed (on any gold set,
    the app's own ones too) within the server's bounds (budget.SCORING_CELLS) and in its one
    slot for heavy work, or None after a message saying why not now."""
    args = (lm, entry.path, entry.mtime, gold.key + lm.view_key, gold.pairs, gold.links)
    args = (*args, both_ways())
    found, grid = alignment_grid.peek(*args)
    if found:
        return grid
    try:
        return within_bounds(lm, gold, lambda: alignment_grid(*args))
    except TimeLimit as e:
        st.error(md(f"The gold set was not scored: {e}"))
        return None


HELD_OUT_WORDS = (
    "130 pairs of Tatoeba's fra-eng corpus that no shipped model trained on (its test split), "
    "aligned by hand under the shipped set's guidelines before any model's output on them was "
    "seen. Their sentences are read from the server's copy of fra-eng.zip."
)


def pick_gold(state: ViewState) -> GoldSet | None:
    """The shipped gold set, the held-out one or two uploaded files (widget ``al_gold``, kept
    in the view state: a link names the choice, never the files); None until usable."""
    try:
        shipped = shipped_gold()
    except (GoldError, OSError) as e:
        st.error(md(f"The shipped gold set cannot be read: {e}"))
        shipped = None
    words = {
        SHIPPED: shipped.name.capitalize() if shipped else "Shipped gold set",
        HELD_OUT: "Held-out Tatoeba pairs",
        UPLOAD: "Upload",
    }
    widget_default("al_gold", state.gold, GOLD_SETS)
    state.gold = source = st.radio(
        "Gold set",
        GOLD_SETS,
        key="al_gold",
        horizontal=True,
        format_func=words.get,
    )
    if source == SHIPPED:
        return shipped
    if source == HELD_OUT:
        st.caption(HELD_OUT_WORDS)
        try:
            return held_out_set()
        except (GoldError, OSError) as e:
            st.info(md(e))
            return None
    return upload_gold()


def upload_gold() -> GoldSet | None:
    """Two uploaders and the 1-indexed checkbox; the GoldSet, or None after a message."""
    st.caption(FORMATS)
    row = st.container(horizontal=True, gap="medium")
    limit = {"width": PANEL_PX, "max_upload_size": max(1, MAX_GOLD_BYTES // 2**20)}  # MB
    pairs = row.file_uploader("Pairs (english ||| french)", key="al_pairs_file", **limit)
    links = row.file_uploader("Gold links (Pharaoh)", key="al_gold_file", **limit)
    one = st.checkbox("1-indexed (Hansards / NAACL 2003)", key="al_one_indexed")
    if pairs is None or links is None:
        st.info("Upload both files to score every reader on them.")
        return None
    try:
        return uploaded_gold((pairs.name, pairs.getvalue()), (links.name, links.getvalue()), one)
    except ValueError as e:  # GoldError, and anything else a file could make the parser raise
        st.error(md(e))
        return None


def show_grid(grid: AlignmentGrid, gold: GoldSet, state: ViewState) -> None:
    """The best reader in words, one heatmap per mode, the table and CSV, the reference."""
    best = grid.best
    st.markdown(
        f"{len(grid.rows)} readers scored on {md(gold.name)} in {grid.seconds:.2f} s. "
        f"**Best: {grid_figs.reader_words(best)}, {mode_label(best.mode)}{ways_words()}**: "
        f"AER {best.aer:.3f} "
        f"(precision {best.precision:.3f}, recall {best.recall:.3f})."
    )
    st.button(
        "Show the best reader above",
        key="al_use_best",
        on_click=use_best,
        args=(best,),
        help="Cross attention, the best reader's layer, head and mode in the view above.",
    )
    if gold.reference:
        reference_line(gold)
    zrange = grid_figs.aer_range(grid.rows)
    row = st.container(horizontal=True, gap="medium")  # side by side where both fit
    name = export_name(state.model, "", what="alignment aer")
    for mode in dict.fromkeys(r.mode for r in grid.rows):  # AWO, AWI (and whole), in order
        fig = grid_figs.aer_grid_figure(grid.rows, mode, zrange)
        chart(fig, f"al_grid_{mode}", row.container(width=PANEL_PX), f"{name}_{mode}")
    table = grid_figs.grid_table(grid.rows)
    number = st.column_config.NumberColumn(format="%.3f")
    st.dataframe(
        spreadsheet_safe(table),
        hide_index=True,
        column_config={c: number for c in ("AER", "precision", "recall")},
    )
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button(
        "AER of every reader as CSV", csv, f"{name}.csv", "text/csv", key="al_grid_csv"
    )


def both_ways() -> bool:
    """Whether the reader picker's "Both ways" box is ticked: every reader (the sentence's,
    the gold set's, both directions') links both ways."""
    return bool(st.session_state.get(BOTH_WAYS_KEY))


def ways_words() -> str:
    """ ", read both ways" where every reader is, else nothing."""
    return ", read both ways" if both_ways() else ""


def use_best(best: GridRow) -> None:
    """Button callback: the view above shows the best reader (kind, layer, head, mode)."""
    st.session_state["at_kind"] = "cross"
    st.session_state["al_mode"] = best.mode
    st.session_state["al_all"] = best.layer == "all"
    st.session_state.pop(SEEN_KEY, None)  # a layer and head put here, not picked: kept ticked
    if best.layer != "all":
        st.session_state["at_layer"], st.session_state["at_head"] = best.layer, best.head


def reference_line(gold: GoldSet) -> None:
    """What a statistical aligner scores on one of the app's gold sets, when
    bench/alignment.py wrote it."""
    ref = reference_score(gold.reference)
    if ref is None:
        st.caption(
            "No statistical aligner's score is recorded here: run `python bench/alignment.py` "
            f"to compare with eflomal on {md(gold.name)}."
        )
        return
    st.caption(
        md(
            f"For comparison, {ref['aligner']} scores AER {ref['aer']:.3f} (precision "
            f"{ref['precision']:.3f}, recall {ref['recall']:.3f}) on {gold.name}: {ref['how']}."
        )
    )


def open_alignment_on_best() -> None:
    """Ask this run to open the Alignment section on the best reader (a callback of the
    section picker, or the first run of a URL that names no layer, head or kind)."""
    st.session_state[OPEN_BEST] = True


def open_when_scored(grid: AlignmentGrid, gold: GoldSet) -> None:
    """Where Alignment was opened before the shipped gold set was scored
    (``open_on_best_reader``): now that it is, run the page again opening on its best reader
    (the view's widgets, drawn above, take it only before they are drawn)."""
    st.session_state[SCORED_BEST] = (grid.best, gold.name)
    st.rerun()


def open_on_best_reader(entry, lm, state: ViewState) -> None:
    """Before the view's controls are drawn: where Alignment is being opened, put the best
    reader of the shipped gold set in the view, and leave the section a note that says so.
    A grid not yet cached for every session is scored by the gold panel below, in the
    server's heavy slot (its place in line shown there), which then runs the page again
    (``open_when_scored``). Nothing when the set cannot be read or scored."""
    if scored_best := st.session_state.pop(SCORED_BEST, None):
        opened_on(*scored_best, state)
        return
    section = st.session_state.get("at_section") or state.section  # the picker's new value
    if not st.session_state.pop(OPEN_BEST, False) or section != "alignment":
        return
    if lm.supports("alignment"):  # said by the section itself
        return
    try:
        gold = shipped_gold()
    except (GoldError, OSError):
        return
    key = gold.key + lm.view_key
    found, grid = alignment_grid.peek(
        lm, entry.path, entry.mtime, key, gold.pairs, gold.links, state.both
    )
    if not found:
        st.session_state[OPEN_WHEN_SCORED] = True
        return
    opened_on(grid.best, gold.name, state)


PICK_ANOTHER = "To read another head, pick its Layer and Head in the view above."
PICK_ONE = (
    "To read one head instead, pick its Layer and Head in the view above: that unticks "
    "“Mean of all layers”."
)


def opened_on(best: GridRow, gold_name: str, state: ViewState) -> None:
    """Put ``best`` in the view (its widgets not drawn yet) and leave the section a note."""
    use_best(best)
    state.kind, state.align = "cross", best.mode
    if best.layer != "all":
        state.layer, state.head = best.layer, best.head
    st.session_state[BEST_NOTE] = (
        f"Opened on the reader that aligns best on {md(gold_name)}: "
        f"{grid_figs.reader_words(best)}, {mode_label(best.mode)}"
        f"{', read both ways' if state.both else ''} (AER {best.aer:.3f}). "
        + (PICK_ONE if best.layer == "all" else PICK_ANOTHER)
    )
