"""Attention page, "Alignment" section: the word links one reader of cross-attention gives."""

from __future__ import annotations

import streamlit as st

from core.alignment.extract import (
    BOTH_WAYS,
    WHOLE,
    Reader,
    alignable,
    from_sentence,
    links,
    modes,
    read,
    whole_target_cross,
)
from core.alignment.gold import write_links
from core.attention.maps import csv_cell, export_name
from core.corpus.bpe import join_pieces
from core.figures import alignment as align_figs
from core.figures.attribution import panel_width
from pages.ui.attention.alignment_gold_view import (
    BEST_NOTE,
    BOTH_WAYS_KEY,
    SEEN_KEY,
    both_ways,
    gold_panel,
)
from pages.ui.attention.attribution_view import cross_choice
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default

HOW = (
    "Each {target} token is linked to the {source} word its row of cross-attention weighs most "
    "(the source `<eos>` column is left out). **AWO** reads the decoder step that outputs "
    "the token; **AWI** the next step, which reads it as its input: Chen et al. (2020) found "
    "the next step often aligns better. A word cut into pieces (BPE) is linked to a word "
    "when any of its pieces is. **Both ways** (awesome-align's extraction, Dou & Neubig 2021) "
    "links a source and a target word where the weight's share of its row times its share of "
    "its column reaches {cut}: a word both sides choose; one may link to several, or none."
)
BOTH_HELP = (
    "Link where (weight / its row's sum) x (weight / its column's sum) reaches {cut}, a cut "
    "chosen once for every model on 100 hand-aligned validation pairs (a dev set apart from "
    "the two gold sets below). Applies to the links here, the gold-set scores and both "
    "directions below."
)
WHOLE_HOW = (
    " **Whole target**: this model's head was trained to align in a pass where every decoder "
    "step sees the whole translation (Garg et al.'s full context); the translation is read "
    "again that way."
)


def alignment_section(page: SectionInputs) -> None:
    """The reader picker, its weights with the links circled, the links as lines and text."""
    source, target = page.lm.language_names
    whole = WHOLE_HOW if WHOLE in modes(page.lm) else ""
    st.caption(HOW.format(source=source, target=target, cut=BOTH_WAYS) + whole)
    if note := st.session_state.pop(BEST_NOTE, None):
        st.info(note)
    reader = pick_reader(page)
    sentence_links(page, reader)
    gold_panel(page)


def pick_reader(page: SectionInputs) -> Reader:
    """The mode (widget ``al_mode``, kept in the URL) and "mean of all layers" (``al_all``)."""
    state, offered = page.state, modes(page.lm)
    if state.align not in offered:  # "whole" from a URL, for a model not trained so
        state.align, state.why["align"] = offered[0], "this model has no head trained so"
    widget_default("al_mode", state.align, offered)
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="large")
    state.align = row.segmented_control(
        f"Read each {page.lm.language_names[1]} token at",
        offered,
        key="al_mode",
        required=True,  # a click on the chosen mode keeps it
        format_func=lambda m: align_figs.MODE_NAMES[m],
        help="AWO: the decoder step that outputs the token. AWI: the next one, which reads it.",
    )
    boxes = row.container(width="content", gap="small")  # the two boxes stay together
    untick_mean_on_pick(state, page.entry.key)
    widget_default("al_all", state.align_all)
    state.align_all = every = boxes.checkbox(
        "Mean of all layers",
        key="al_all",
        help="Average every decoder layer and head instead of the view's layer and head. "
        "Picking a Layer or Head in the view above unticks it.",
    )
    widget_default(BOTH_WAYS_KEY, state.both)
    both = BOTH_HELP.format(cut=BOTH_WAYS)
    state.both = boxes.checkbox("Both ways", key=BOTH_WAYS_KEY, help=both)
    if every:
        return Reader(None, None, state.align)
    layer, head = cross_choice(page.pieces, state)
    return Reader(layer, int(head) if head.isdigit() else None, state.align)


def untick_mean_on_pick(state: ViewState, model: str) -> None:
    """Untick "Mean of all layers" (``al_all``, not drawn yet) when the view's Layer or Head
    changed since the section last ran on the same ``model``: the reader picked is then read
    (another model's layers may clamp them: nothing was picked)."""
    now, seen = (model, state.layer, state.head), st.session_state.get(SEEN_KEY)
    st.session_state[SEEN_KEY] = now
    if seen is not None and seen[0] == model and seen != now:
        st.session_state["al_all"] = False


def sentence_links(page: SectionInputs, reader: Reader) -> None:
    """The reader's matrix beside the lines view, then the Pharaoh line and the CSV."""
    p, state, t = alignable(page.pieces), page.state, page.translation
    read_whole = reader.mode == WHOLE and t.out_ids  # (L, H, T, S) from the full-context pass
    whole = whole_target_cross(page.lm, t.src_ids, t.out_ids) if read_whole else None
    pair = from_sentence(p.cross, p.src_tokens, p.output_tokens, whole)
    src, tgt = align_figs.sentence_pieces(pair, p.src_tokens, p.output_tokens)
    if not tgt:
        st.info("The translation is empty: there is nothing to align.")
        return
    weights, found = read(pair, reader), links(pair, reader, None, both_ways())  # (T, S), {(s, t)}
    name = link_name(state, reader)
    row = st.container(horizontal=True, gap="medium")  # side by side where both fit
    ways = ", both ways" if both_ways() else ""
    title = f"{align_figs.MODE_NAMES[reader.mode]} — {align_figs.reader_words(reader)}{ways}"
    notes = [align_figs.ROW_WORDS[reader.mode].format(target=page.lm.language_names[1])]
    marked = align_figs.link_cells(pair, found)
    languages = page.lm.language_names
    fig = align_figs.link_matrix_figure(
        weights, src, tgt, marked, title, notes, page.stretch, languages
    )
    chart(fig, "al_matrix", row.container(width=panel_width(len(src))), name)
    words = join_pieces(src), join_pieces(tgt)
    strengths = align_figs.link_weights(weights, pair, found)
    lines = align_figs.link_lines_figure(
        *words, strengths, f"{len(found)} links as lines", languages
    )
    right = row.container(width=panel_width(max(map(len, words))))
    chart(lines, "al_lines", right, f"{name}_lines")
    links_text(weights, pair, found, (src, tgt), name, languages)


def link_name(state: ViewState, reader: Reader) -> str:
    """The exports' file name: model, sentence, layer, head and mode."""
    if reader.layer is None:
        return export_name(state.model, state.sentence, what=f"alignment {reader.mode} all")
    head = reader.head_label
    return export_name(state.model, state.sentence, "cross", reader.layer, head, reader.mode)


def links_text(weights, pair, found, pieces, name: str, languages: tuple[str, str]) -> None:
    """The links as a Pharaoh line (source-target, 0-indexed) and as a CSV with weights."""
    source, target = languages
    st.markdown(f"**Links** (Pharaoh: {source} word – {target} word, counted from 0)")
    st.code(write_links(found) or "(none)", language=None)
    table = align_figs.links_table(weights, pair, found, *pieces, languages)
    for column in (f"{source} word", f"{target} word"):
        table[column] = table[column].map(csv_cell)
    st.download_button(
        "Links as CSV",
        table.to_csv(index=False, lineterminator="\r\n").encode("utf-8"),
        f"{name}.csv",
        "text/csv",
        key="al_links_csv",
        help="One row per link: both words, their positions and the link's weight (the "
        "largest weight over the words' pieces).",
    )
