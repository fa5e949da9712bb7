"""Attention page, "Inside a head" section: one query's q·k taken apart, and the lines view."""

from __future__ import annotations

import streamlit as st

from core.attention import token_pick
from core.attention.kinds import short_title
from core.attention.maps import export_name, hide_columns
from core.attention.query_key import InsideHeadError
from core.figures import inside_head as figs
from core.figures.clicks import clicked_token
from pages.ui.attention import cached_inside_head as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.text import md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default


def inside_head_section(page: SectionInputs) -> None:
    """The q·k view of the chosen head and query, then the lines view of the layer (a
    one-stack model's view spans its whole sequence: no lines of one kind's map)."""
    state, t = page.state, page.translation
    head = head_number(state)
    try:
        first = cached.query_key_view(page.lm, t, page.key, state.kind, state.layer, head, 0)
        asked = "at_query" in st.session_state or "query" in state.asked
        if not state.query and not asked:  # the first output step (a prompt's ":", a mask)
            state.query = first.first
        query = query_picker(first.query_tokens, state)
        v = first
        if query != 0:
            v = cached.query_key_view(page.lm, t, page.key, state.kind, state.layer, head, query)
    except InsideHeadError as e:
        st.error(md(e))
        return
    name = export_name(state.model, state.sentence, v.kind, state.layer, head, f"q{query}")
    chart(figs.vectors_figure(v), "qk_vectors", name=f"{name}_vectors")
    chart(figs.scores_figure(v), "qk_scores", name=f"{name}_scores")
    if v.kind != state.kind:  # the whole sequence a one-stack model reads
        st.caption(md(sequence_words(v)))
        return
    st.caption(
        md(
            f"q = x W_q and k_j = x_j W_k of head {head}, recomputed from the model's own "
            "layers on one teacher-forced pass over this translation (its own output fed "
            f"back), over the model's own tokens. score_j = {v.score_words}; the "
            "softmax runs over the keys the mask allows: the weights are row "
            f"{query} of this head's map in the Maps section (pieces unmerged)."
        )
    )
    lines_view(page, head)


def sequence_words(v) -> str:
    """What a one-sequence model's q·k view shows, in words: the sequence (read both ways where
    its mask lets a query see the keys after it), RoPE, shared keys."""
    read = (
        "your sentence as it reads it, every token seeing every other"
        if v.mask[v.query + 1 :].any()
        else "the prompt with your sentence, then its output fed back"
    )
    words = [
        f"q and k of head {v.head}, recomputed from the model's own layers over the whole "
        f"sequence it reads ({read}). score_j = {v.score_words}; the softmax equals row "
        f"{v.query} of the model's own attention."
    ]
    if v.unrotated is not None:
        words.append(
            "Both q and k are rotated by their positions (rotary embedding) before the product; "
            "the light bars are the scores the same q and k give unrotated: the difference is "
            "what position adds."
        )
    if v.sharing and len(v.sharing) > 1:
        heads = ", ".join(str(h) for h in v.sharing)
        words.append(f"Grouped-query attention: heads {heads} read the same keys and values.")
    if v.window:
        words.append(f"A sliding window: each token sees at most the last {v.window} tokens.")
    return " ".join(words)


def head_number(state: ViewState) -> int:
    """The head of the view, or head 0 (said in a caption) when a mean or max is chosen."""
    if state.head.isdigit():
        return int(state.head)
    st.caption("q·k is per head: head 0 is shown. Pick a head number above for another.")
    return 0


def query_picker(queries: list[str], state: ViewState) -> int:
    """The q·k view's query token (widget ``at_query``), kept in the view state and URL."""
    options = list(range(len(queries)))
    if state.query > options[-1]:
        state.query, state.why["query"] = options[-1], f"query tokens 0 to {options[-1]}"
    widget_default("at_query", state.query, options)
    state.query = st.selectbox(
        "Query token",
        options,
        key="at_query",
        format_func=lambda i: f"{i}: {queries[i]}",
        help="The token whose query vector is compared with every key (the model's own "
        "tokens: BPE pieces stay pieces here).",
    )
    return state.query


LINES = "lines"  # the lines view's chart key (its selection: the clicked token)
TOKEN_CLICK = "at_lines_click"  # (side, index as drawn) of the token a click picked


def lines_view(page: SectionInputs, head: int) -> None:
    """bertviz's head view: a line per query-key pair, one head or every head of the layer."""
    maps, state = page.maps, page.state
    st.subheader("Lines: every query → key pair")
    weights = maps.weights(state.kind)[state.layer]  # (H, Tq, Tk)
    queries, keys = maps.tokens(state.kind)
    left, right = st.columns(2, vertical_alignment="bottom")
    widget_default("at_lines_all", state.lines_all)
    state.lines_all = left.toggle(
        f"Every head of layer {state.layer}, one colour each",
        key="at_lines_all",
        help="Off: only the chosen head's lines. The legend shows or hides a head.",
    )
    pick = lines_token(right, queries, keys, state)
    heads = list(range(maps.heads)) if state.lines_all else [head]
    cut = hide_columns(weights[heads], queries, keys, state.hide)  # (H', Tq, Tk')
    which = f"all {maps.heads} heads" if state.lines_all else f"head {head}"
    title = f"{short_title(state.kind)}, layer {state.layer}, {which}"
    drawn = (pick.axis, pick.index) if pick is not None and not pick.problem else None
    fig = figs.lines_figure(
        cut.weights, queries, cut.keys, state.kind, heads, title, drawn, cut.note
    )
    what = "lines" if drawn is None else f"lines {state.token}"
    name = export_name(state.model, state.sentence, state.kind, state.layer, None, what)
    chart(fig, LINES, name=name, on_click=_clicked)
    st.caption(
        "Left: the queries, right: the keys; each line's opacity is the weight "
        f"(lines under {figs.MIN_LINE_WEIGHT} are left out)."
        + (" Pieces are merged into words here, as in the Maps." if state.words else "")
    )


def _clicked() -> None:
    """The lines view's on_select: the clicked token, picked on the next run (lines_token)."""
    if (token := clicked_token(st.session_state.get(LINES))) is not None:
        st.session_state[TOKEN_CLICK] = token


def lines_token(where, queries: list[str], keys: list[str], state: ViewState):
    """Pick a token whose lines alone are drawn (URL ``token``, as the Maps' outline), from a
    list or by a click on it in the chart (a click on the picked one draws every line)."""
    options = token_pick.pick_options(queries, keys)
    if state.token and state.token not in options:
        state.token = ""
    if (click := st.session_state.pop(TOKEN_CLICK, None)) is not None:
        side, index = click
        token = token_pick.pick_from_cell(side, index, index, keys, state.hide)
        if token in options:
            state.token = "" if token == state.token else token
            st.session_state["at_lines_token"] = state.token
    widget_default("at_lines_token", state.token, options)
    state.token = where.selectbox(
        "Show only the lines of",
        options,
        key="at_lines_token",
        format_func=lambda v: "every token" if not v else token_pick.pick_label(v, queries, keys),
        help="Or click a token in the chart (click it again for every line).",
    )
    pick = token_pick.resolve_pick(state.token, queries, keys, state.hide)
    if pick is not None and pick.problem:
        where.caption(md(f"Every line drawn: {pick.problem}."))
    return pick
