"""Attention page, "Maps" section: the chosen head large, every head, head statistics."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.attention import head_stats, token_pick
from core.attention.kinds import kind_labels
from core.attention.maps import blank_note, export_name, hide_columns, select_view, view_csv
from core.attention.sentence_maps import SentenceMaps
from core.figures import attention as figs
from core.figures import comparison as cmp_figs
from core.figures import head_roles as roles_fig
from core.figures.attribution import panel_width
from core.figures.clicks import clickable, clicked_cell
from core.figures.model_view import model_view_figure
from pages.ui.attention import cached_inside_head
from pages.ui.attention.controls import all_layers_toggle
from pages.ui.attention.inputs import SectionInputs
from pages.ui.cached import head_table
from pages.ui.charts import chart
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_state import OVERVIEWS, ViewState
from pages.ui.view_widgets import widget_default

OVERVIEW_WORDS = {OVERVIEWS[0]: "heat maps", OVERVIEWS[1]: "lines (model view)"}
BIG = "big"  # the large map's chart key (its selection: the clicked cell)
BIG_PX = 620  # the large map's least width: the statistics beside it from a 900 px page on,
STATS_PX = 260  # below it on a narrower one (a 760 px page had them in a 137 px strip)
CELL_CLICK = "at_cell_click"  # (row, column) of the cell a click picked, for the next run
CLICK_WORDS = {"query": "row (query)", "key": "column (key)"}


def maps_section(page: SectionInputs) -> None:
    """The chosen head large, the overview grid and the head statistics."""
    maps, state = page.maps, page.state
    view = select_view(maps, state.kind, state.layer, state.head, state.hide)
    name = export_name(state.model, state.sentence, state.kind, state.layer, state.head)
    pick = token_picker(maps, state)
    row = st.container(horizontal=True, gap="small")  # the statistics beside where both fit
    left = row.container(width=max(BIG_PX, panel_width(view.weights.shape[-1])), key="big_map")
    right = row.container(width=STATS_PX, key="head_summary")  # else below, not a strip
    big = clickable(cmp_figs.add_highlight(figs.view_figure(view, page.stretch), pick))
    chart(big, BIG, left, name, on_click=_clicked)
    table = head_table(maps, page.key, state.words, state.kind)  # shared, of the full map
    with right:
        head_summary(table, state, page.lm.meta)
        st.download_button(
            "Weights as CSV",
            view_csv(view),
            mime="text/csv",
            file_name=f"{name}.csv",
            help="One line per cell. A blank row (all its weight on hidden <bos>/<eos>) "
            "has an empty weight and a note.",
        )
        st.caption("Each chart's toolbar (camera icon) saves it as PNG. The URL keeps this view.")
    if view.blank:
        note = blank_note(view.blank, view.query_tokens, view.weights)
        left.caption(
            md(
                f"Blank rows — {note}. Their whole weight was on the hidden columns, so "
                "there is nothing left to renormalise; they are not zero."
            )
        )
    overview(page, pick)
    head_statistics(table, state, page.lm.meta)
    if page.lm.supports("head_roles") is None:
        roles_panel(page)


def roles_panel(page: SectionInputs) -> None:
    """Each attention's heads (one map per kind; a one-stack model's one): previous- and
    next-token, first- and last-token sinks, duplicate-token and induction scores."""
    st.markdown("**What each head does** (each attention over the tokens it reads)")
    try:
        roles = cached_inside_head.roles(page.lm, page.translation, page.key)
    except ValueError as e:  # a vocabulary too small for the tokens read twice
        st.info(md(str(e)))
        return
    for a in roles.attentions:
        st.markdown(f"*{md(kind_labels(a.kind)[0])}*")  # the attention the map below reads
        name = export_name(page.state.model, page.state.sentence, a.kind, None, "all", "roles")
        chart(roles_fig.head_roles_figure(a), f"head_roles_{a.kind}", name=name)
    st.caption(
        "previous / next token: mean weight on the token just before / after (next: an "
        "attention that may look forward, an encoder's); first / last-token sink: on the "
        "first / last token (many heads park weight there; cross-attention, which reads the "
        "source from the output, has only these: its end token is the known no-op); "
        "duplicate-token and induction: from a token of a random sequence's second copy to "
        "its first copy and to the token that followed it (Olsson et al. 2022), read by each "
        "self-attention (an encoder-decoder's source and decoder input both). Also as JSON "
        "lines: python -m core.inside_head --head-roles."
    )


def _clicked() -> None:
    """The large map's on_select: the clicked cell, picked on the next run (token_picker)."""
    if (cell := clicked_cell(st.session_state.get(BIG))) is not None:
        st.session_state[CELL_CLICK] = cell


def token_picker(maps: SentenceMaps, state: ViewState) -> token_pick.Highlight | None:
    """Pick a query row or key column to outline (URL ``token``) from a list or by a click on
    the large map; where it is drawn, or None."""
    queries, keys = maps.tokens(state.kind)
    options = token_pick.pick_options(queries, keys)
    # the middle column wide enough for both choices of the click axis at 760 px
    left, middle, right = st.columns([2, 3, 2], vertical_alignment="bottom")
    if state.token and state.token not in options:
        if "token" not in state.asked:  # a link's is said in its note
            right.caption(md(f"Token {state.token} is not in this map: none outlined."))
        state.token, state.why["token"] = "", "not a row or column of this map"
    widget_default("at_click_axis", state.click, token_pick.CLICK_AXES)
    state.click = axis = (
        middle.segmented_control(
            "A click on a cell outlines its",
            token_pick.CLICK_AXES,
            format_func=CLICK_WORDS.get,
            key="at_click_axis",
            help="Click a cell of the large map: its row (the query) or its column (the key) is "
            "outlined there and in every cell of the overview.",
        )
        or state.click
    )
    if (cell := st.session_state.pop(CELL_CLICK, None)) is not None:
        clicked = token_pick.pick_from_cell(axis, *cell, keys, state.hide)
        if clicked in options:
            st.session_state["at_token"] = clicked
    widget_default("at_token", state.token, options)
    state.token = left.selectbox(
        "Outline a token",
        options,
        key="at_token",
        format_func=lambda v: token_pick.pick_label(v, queries, keys),
        help="A query (row) or key (column), counted with <bos>/<eos>; or click a cell of "
        "the large map.",
    )
    pick = token_pick.resolve_pick(state.token, queries, keys, state.hide)
    if pick is not None:
        done = f"{pick.label}: outlined in the large map and in every cell of the overview"
        right.caption(md(f"Not outlined: {pick.problem}." if pick.problem else f"{done}."))
    return pick


def head_summary(table: pd.DataFrame, state: ViewState, meta: dict) -> None:
    """Statistics and label of the chosen head (and whether it was trained to align);
    ``table``: the kind's head statistics (head_stats.head_table)."""
    if not state.head.isdigit():
        st.caption("Statistics are per head: pick a head number to see them.")
        return
    row = head_stats.row_of(table, state.layer, int(state.head))
    st.markdown(f"**{md(row['label'])}**")
    if state.hide:
        st.caption("Measured on the full map: <bos>/<eos> count, though hidden in the chart.")
    supervised = head_stats.supervised_head(meta)
    if state.kind == "cross" and supervised and supervised[:2] == (state.layer, int(state.head)):
        st.info(md(f"This head was trained to align words (Garg et al. 2019): {supervised[2]}."))
    shares = {
        "diagonal": "on the diagonal",
        "near diagonal": "near the rescaled diagonal",
        "previous": "one column left of the diagonal",
        "eos": "on <eos>",
        "bos": "on <bos>",
    }
    lines = [f"entropy {row['entropy']:.2f} nats"] + [
        f"{words} {row[name]:.0%}"
        for name, words in shares.items()
        if name in row and pd.notna(row[name])
    ]
    if "monotonicity" in row and pd.notna(row["monotonicity"]):
        lines.append(f"monotonicity {row['monotonicity']:.2f}")
    st.markdown("\n".join(f"- {md(x)}" for x in lines))


def overview(page: SectionInputs, pick: token_pick.Highlight | None) -> None:
    """Every head of the kind: all layers for a small model, else one layer unless asked."""
    maps, state = page.maps, page.state
    n_layers = maps.layers(state.kind)
    show_all = figs.shows_full_grid(n_layers, maps.heads) or all_layers_toggle(
        state, "at_all_layers", f"Overview of all {n_layers} layers × {maps.heads} heads"
    )
    layers = list(range(n_layers)) if show_all else [state.layer]
    layer = None if show_all else state.layer
    widget_default("at_overview", state.overview, OVERVIEWS)
    state.overview = (
        st.segmented_control(
            "Overview as",
            OVERVIEWS,
            key="at_overview",
            format_func=OVERVIEW_WORDS.get,
            help="Heat maps, or bertviz's model view: each head's weights as lines from the "
            "queries (left of a cell) to the keys (right), opacity the weight.",
        )
        or state.overview
    )
    if state.overview == OVERVIEWS[1]:
        name = export_name(state.model, state.sentence, state.kind, layer, None, "model view")
        chart(model_view(maps, state.kind, state.hide, layers, pick), "model_view", name=name)
        return
    grid = figs.grid_view_figure(maps, state.kind, state.hide, layers, page.stretch)
    name = export_name(state.model, state.sentence, state.kind, layer, None, "grid")
    chart(cmp_figs.add_highlight(grid, pick), "grid", name=name)


def model_view(maps, kind: str, hide: bool, layers: list[int], pick) -> object:
    """The model view of these layers (hidden <bos>/<eos> columns left out; a picked token's
    lines only)."""
    queries, keys = maps.tokens(kind)
    cut = hide_columns(maps.weights(kind)[layers], queries, keys, hide)  # (L', H, Tq, Tk')
    drawn = (pick.axis, pick.index) if pick is not None and pick.index >= 0 else None
    names = [f"layer {i}" for i in layers]
    return model_view_figure(cut.weights, queries, cut.keys, kind, names, drawn, cut.note)


def head_statistics(table: pd.DataFrame, state: ViewState, meta: dict) -> None:
    """The statistics of every head of the kind (``table``), with what each column means."""
    st.markdown("**Head statistics** (per layer and head; labels are simple rules of thumb)")
    st.dataframe(
        spreadsheet_safe(head_stats.mark_supervised(table, state.kind, meta)),
        hide_index=True,
        column_config={
            name: st.column_config.NumberColumn(format="%.2f")
            for name in (
                "entropy",
                "diagonal",
                "near diagonal",
                "previous",
                "eos",
                "bos",
                "monotonicity",
            )
        },
    )
    st.caption(
        "Measured on the full maps, <bos>/<eos> included even when the charts hide them "
        "(a head is what it is, whatever is drawn). entropy: spread of each "
        "row (nats); diagonal / previous: mean weight on the row's own column / one column "
        "left; near diagonal (cross): weight within one key of the diagonal stretched "
        "across the two lengths; eos / bos: weight on that key; monotonicity: rank "
        "correlation of output position with its most-attended source position (cross). "
        "As JSON lines: python -m core.head_scores --head-stats --sentence … --kind …."
    )
