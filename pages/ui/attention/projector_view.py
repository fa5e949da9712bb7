"""Attention page, "Where tokens live" section: the encoder's or decoder's token
representations of validation sentences projected to 2-D or 3-D, coloured by token,
position, layer or sentence, with a picked token's nearest neighbours
(``core.attention.projector``; ``python -m core.project`` prints the same figures)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.attention.maps import export_name
from core.attention.projector import (
    ALL_LAYERS,
    AUTOMATIC,
    COLOURS,
    DIMS,
    METHOD_NAMES,
    METHODS,
    READS,
    SENTENCE_CHOICES,
    Projection,
    ProjectionError,
    layer_count,
    sides,
    umap_available,
)
from core.corpus.source import DataError
from core.figures import projector as figs
from pages.ui.attention import cached_projector as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.no_corpus import corpus_missing, no_corpus
from pages.ui.heavy_work import TimeLimit, heavy_slot
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_widgets import widget_default

SIDE_NAMES = {"encoder": "encoder (source)", "decoder": "decoder (target)"}
READ_NAMES = {"reference": "the reference", "translation": "its own translation"}
NO_PLACES = "The tokens cannot be placed for this model here"
NONE = -1  # no sentence picked
CHART = "space_chart"
CLICK = "space_click"  # the point a click picked, (sentence, position, layer), for the next run


def _layer(state, top: int) -> int:
    """The layer picker (widget ``space_layer``): every layer, or one of 0..top."""
    options = ["all", *map(str, range(top + 1))]
    shown = str(top) if state.space_layer == "last" else state.space_layer
    if shown not in options:
        state.why["space_layer"] = f"this stack has layers 0 to {top}"
    elif state.asked.get("space_layer") == str(top):
        state.granted("space_layer")  # the last layer, asked by its number
    widget_default("space_layer", shown if shown in options else str(top), options)
    names = {"all": "every layer", "0": "0 (input)", str(top): f"{top} (output)"}
    choice = st.selectbox(
        "Layer", options, key="space_layer", format_func=lambda o: names.get(o, o)
    )
    state.space_layer = "last" if choice == str(top) else choice
    return ALL_LAYERS if choice == "all" else int(choice)


def _settings(page: SectionInputs) -> tuple:
    """The side, layer, method, dims, colour and sentence widgets, written into the state."""
    state = page.state
    methods = METHODS if umap_available() else ("pca",)
    cols = [*st.columns(3), *st.columns(3)]
    with cols[0]:
        offered = sides(page.lm)
        widget_default("space_side", state.space_side, offered)
        state.space_side = st.selectbox(
            "Side", offered, key="space_side", format_func=SIDE_NAMES.get
        )
    with cols[1]:
        layer = _layer(state, layer_count(page.lm, state.space_side))
    with cols[3]:
        widget_default("space_method", state.space_method, methods)
        state.space_method = st.selectbox(
            "Method", methods, key="space_method", format_func=METHOD_NAMES.get
        )
    with cols[4]:
        widget_default("space_dims", state.space_dims, DIMS)
        state.space_dims = st.selectbox("Dimensions", DIMS, key="space_dims")
    with cols[2]:
        widget_default("space_colour", state.space_colour, COLOURS)
        state.space_colour = st.selectbox("Colour by", COLOURS, key="space_colour")
    with cols[5]:
        widget_default("space_sentences", state.space_sentences, SENTENCE_CHOICES)
        state.space_sentences = st.selectbox(
            "Sentences",
            SENTENCE_CHOICES,
            key="space_sentences",
            help="the first validation sentences of the model's split",
        )
    if state.space_side == "decoder":
        widget_default("space_reads", state.space_reads, READS)
        state.space_reads = st.radio(
            "The decoder reads",
            READS,
            key="space_reads",
            horizontal=True,
            format_func=READ_NAMES.get,
            help="Each sentence's first reference (teacher forcing), or the model's own greedy "
            "translation of it: where its own words live.",
        )
    return state.space_side, layer, state.space_method, state.space_dims, state.space_sentences


def _clicked() -> None:
    """The chart's on_select: the clicked point becomes the picked token on the next run."""
    points = (st.session_state.get(CHART) or {}).get("selection", {}).get("points") or []
    data = points[0].get("customdata") if points else None
    if isinstance(data, dict):  # a row of a 2-D customdata arrives keyed "0".."3"
        data = [data.get(str(i)) for i in range(4)]
    if isinstance(data, list) and len(data) == 4 and all(isinstance(v, int | float) for v in data):
        st.session_state[CLICK] = tuple(int(v) for v in data[1:])


def _picked(page: SectionInputs, result: Projection) -> int | None:
    """The sentence and token pickers (a click on the chart sets them); the picked point."""
    state = page.state
    if (click := st.session_state.pop(CLICK, None)) is not None:
        state.space_pick = ":".join(map(str, click))
        st.session_state["space_sentence"], st.session_state["space_position"] = click[:2]
    pick = [int(v) for v in state.space_pick.split(":")] if state.space_pick else None
    sentences = [NONE, *range(len(result.texts))]
    widget_default("space_sentence", pick[0] if pick else NONE, sentences)
    left, right = st.columns([3, 1])
    sentence = left.selectbox(
        "Pick a token (or click a point): its sentence",
        sentences,
        key="space_sentence",
        format_func=lambda i: "none" if i == NONE else f"{i}: {result.texts[i]}",
    )
    if sentence == NONE:
        state.space_pick = ""
        return None
    last = result.layers[-1]
    layer = pick[2] if pick and pick[:1] == [sentence] and pick[2] in result.layers else last
    mine = (result.sentence == sentence) & (result.layer == layer)
    tokens = [result.tokens[i] for i in mine.nonzero()[0]]
    positions = list(range(len(tokens)))
    widget_default("space_position", pick[1] if pick and pick[0] == sentence else 0, positions)
    position = right.selectbox(
        "its token", positions, key="space_position", format_func=lambda i: f"{i}: {tokens[i]}"
    )
    state.space_pick = f"{sentence}:{position}:{layer}"
    return result.index_of(sentence, position, layer)


def _neighbour_table(result: Projection, index: int, near: list[dict]) -> None:
    """The picked token and its nearest neighbours, most similar first."""
    p = result.point(index)
    st.markdown(
        md(
            f"Nearest neighbours of “{p['token']}” (sentence {p['sentence']}, position "
            f"{p['position']}, layer {p['layer']}), by cosine similarity of the "
            f"{result.vectors.shape[1]}-wide representations at that layer:"
        )
    )
    table = pd.DataFrame(
        {
            "similarity": [n["similarity"] for n in near],
            "token": [n["token"] for n in near],
            "sentence": [n["sentence"] for n in near],
            "position": [n["position"] for n in near],
            "text": [result.texts[n["sentence"]] for n in near],
        }
    )
    st.dataframe(spreadsheet_safe(table), hide_index=True)


def _projection(asked: tuple, heavy: bool) -> Projection | None:
    """The projection ``asked`` for: kept for every session, or computed now (UMAP, or more
    than AUTOMATIC sentences, only behind a button and in the server's heavy slot); None
    with a message when it is not computed."""
    found, result = cached.projection.peek(*asked)
    if found or not heavy:
        return result if found else cached.projection(*asked)
    method, n = METHOD_NAMES[asked[5]], asked[7]
    st.info(
        f"{method} of {n} sentences takes a while (up to a few minutes with UMAP): it runs "
        "in the server's slot for heavy work, one at a time, and is kept for every session."
    )
    if not st.button(f"Project {n} sentences with {method}", key="space_go"):
        return None
    with heavy_slot() as slot:
        if slot is None:
            return None
        try:
            return cached.projection(*asked)
        except TimeLimit as e:
            st.error(md(f"The points were not projected: {e}"))
            return None


def projector_section(page: SectionInputs) -> None:
    """Settings, the scatter, the picked token's neighbours and every point as CSV."""
    st.caption(
        "Each token of the validation sentences is a point: its representation at a layer "
        "(layer 0 is what the first layer reads; the decoder reads each sentence's reference, "
        "or the model's own translation), "
        "projected from the model's width to 2 or 3 dimensions. PCA keeps the directions of "
        "largest variance (exact); UMAP keeps neighbourhoods. Points that sit together are "
        "tokens the model represents alike."
    )
    if (missing := corpus_missing(page.lm.meta)) is not None:  # before menus that cannot work
        no_corpus(NO_PLACES, missing)
        return
    side, layer, method, dims, n = _settings(page)
    entry, state = page.entry, page.state
    reads = state.space_reads if side == "decoder" else READS[0]  # the encoder reads sources
    asked = (page.lm, entry.path, entry.mtime, side, layer, method, dims, n, state.target_lang)
    asked = (*asked, reads)
    try:
        result = _projection(asked, method == "umap" or n > AUTOMATIC)
    except DataError as e:
        no_corpus(NO_PLACES, e)
        return
    except ProjectionError as e:
        st.error(md(e))
        return
    if result is None:
        return
    index = _picked(page, result)
    near = result.neighbours(index) if index is not None else []
    fig = figs.projection_figure(result, state.space_colour, index, [n["index"] for n in near])
    name = export_name(state.model, "", None, None, None, f"tokens {side}")
    st.plotly_chart(
        fig,
        width="stretch",
        key=CHART,
        on_select=_clicked,
        selection_mode="points",
        config={"displaylogo": False, "toImageButtonOptions": {"filename": name}},
    )
    if result.explained:
        kept = sum(result.explained)
        st.caption(f"These {dims} axes keep {kept:.0%} of the variance of the points.")
    if index is not None:
        _neighbour_table(result, index, near)
    csv = spreadsheet_safe(pd.DataFrame(result.rows())).to_csv(index=False, lineterminator="\r\n")
    st.download_button("Every point as CSV", csv.encode("utf-8"), f"{name}.csv", "text/csv")
