"""The Attention page's controls above every section: kind, layer, head, display."""

from __future__ import annotations

import streamlit as st

from core.attention.kinds import BOUNDARY_TOKENS, KIND_NAMES, KINDS
from core.attention.maps import head_options
from core.attention.sentence_maps import SentenceMaps
from core.attention.word_maps import has_pieces
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import clamp_widget, widget_default

HEAD_WORDS = {"mean": "mean of heads", "max": "max of heads", "rollout": "rollout"}


def view_controls(maps: SentenceMaps, state: ViewState, subword: bool, pieces: str = "BPE") -> bool:
    """Kind, layer, head and display toggles; returns whether colours are stretched."""
    cols = st.columns([3, 1, 1.5])
    kinds = maps.drawn_kinds or list(KINDS)  # a model that reads no source: decoder self only
    widget_default("at_kind", state.kind, kinds)
    state.kind = cols[0].radio(
        "Attention kind",
        kinds,
        key="at_kind",
        horizontal=True,
        format_func=lambda k: KIND_NAMES[k],
    )
    layers = list(range(maps.layers(state.kind)))
    clamp_widget("at_layer", min(state.layer, layers[-1]), layers)
    state.layer = cols[1].selectbox("Layer", layers, key="at_layer")
    heads = head_options(state.kind, maps.heads)
    clamp_widget("at_head", state.head if state.head in heads else "0", heads)
    state.head = cols[2].selectbox(
        "Head",
        heads,
        key="at_head",
        format_func=lambda h: HEAD_WORDS.get(h, f"head {h}"),
        help="A head, the mean or max over the layer's heads, or (encoder) attention "
        "rollout through layers 0 to this one.",
    )
    return display_toggles(state, subword, boundary_words(maps), pieces, has_pieces(maps))


def boundary_words(maps: SentenceMaps) -> str:
    """The boundary tokens these maps have, as the hide toggle names them: "<bos>/<eos>", or
    a Hugging Face model's "<s>/</s>/<pad>" (those it has)."""
    tokens = {*maps.src_tokens, *maps.decoder_inputs, *maps.output_tokens}
    found = [t for t in BOUNDARY_TOKENS if t in tokens]
    return "/".join(found) if found and "<eos>" not in found else "<bos>/<eos>"


def display_toggles(
    state: ViewState,
    subword: bool,
    boundary: str = "<bos>/<eos>",
    pieces: str = "BPE",
    mergeable: bool = True,
) -> bool:
    """Hide <bos>/<eos>, merge pieces (greyed out where no token here continues a word),
    stretch colours, on a row; returns the stretch."""
    row = st.container(horizontal=True, gap="large")
    if subword:
        widget_default("at_words", state.words)
        state.words = row.toggle(
            "Merge pieces into words",
            key="at_words",
            disabled=not mergeable,
            help=f"This model reads and writes {pieces} pieces (“##” continues a word). Merged, a "
            "word's column is the sum over its pieces and its row the mean of its pieces' "
            "rows, so rows still sum to 1. The decoding playback always shows pieces."
            if mergeable
            else f"This model reads {pieces} tokens, but no token here continues a word: "
            "every token is a whole word already, so there is nothing to merge.",
        )
    else:
        state.words, state.why["words"] = False, "this model reads whole words, not pieces"
    widget_default("at_hide", state.hide)
    state.hide = row.toggle(
        f"Hide {boundary}",
        key="at_hide",
        help=f"Drops the {boundary} columns and renormalises each row. A row whose whole "
        "weight was on them is left blank (decoder self-attention: step 0 reads only the "
        "start token).",
    )
    widget_default("at_stretch", state.stretch)
    state.stretch = row.toggle(
        "Stretch colours",
        key="at_stretch",
        help="Top of the colour scale at the 99th percentile instead of 1.",
    )
    return state.stretch


def all_layers_toggle(state: ViewState, key: str, label: str) -> bool:
    """The toggle (widget ``key``) that shows every layer of a large model, kept in the state."""
    widget_default(key, state.all_layers)
    state.all_layers = st.toggle(label, key=key)
    return state.all_layers
