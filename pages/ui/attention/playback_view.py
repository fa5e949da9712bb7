"""Attention page, "Decoding playback" section: decoding step by step; teacher forcing beside it."""

from __future__ import annotations

import streamlit as st

from core.attention.comparison import unknown_words
from core.attention.kinds import short_title
from core.attention.maps import decoder_view, export_name, playback_step, select_view
from core.figures import attention as figs
from core.figures import playback as playback_figs
from core.model.parts import TranslationError
from pages.ui.attention import player
from pages.ui.attention.inputs import SectionInputs
from pages.ui.cached import teacher_forced
from pages.ui.charts import chart
from pages.ui.text import code, md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import bounded, widget_default, write_url

PLAYER = "at_play"  # the play button's key


def playback_section(page: SectionInputs) -> None:
    """Step through decoding as it happened (or through a forced pass); compare with a
    teacher-forced reference where the model writes an output of its own."""
    n_steps, state = len(page.pieces.output_tokens), page.state
    if n_steps > 1:
        player.play_button(PLAYER, state.step >= n_steps - 1)
    st.fragment(decoding_step, run_every=player.run_every(PLAYER))(page)
    if page.lm.supports("translate") is None:  # a model that writes an output of its own
        forced_vs_free(page)


def decoding_step(page: SectionInputs) -> None:
    """The step slider and what the decoder did at that step (a fragment: it ticks while
    playing)."""
    maps, state = page.pieces, page.state  # the playback always shows the model's own pieces
    layer = min(state.layer, maps.layers("cross") - 1)
    step = output_step(len(maps.output_tokens), state)
    p = playback_step(maps, page.translation.topk, step, layer)
    done = " ".join(p.prefix[:-1])
    makes = "is given the next token" if page.translation.forced else "produces"
    st.markdown(
        f"Step {step}: reads {code(p.read)}, {makes} **{code(p.produced)}** — so far: "
        f"{md(done)} **{md(p.produced)}**"
    )
    name = export_name(state.model, state.sentence, None, layer, None, f"step {step}")
    left, right = st.columns(2)
    if p.src_tokens:  # a token sequence has no source to look at: no empty chart
        cross = playback_figs.head_rows_figure(
            p.cross,
            p.src_tokens,
            f"Cross attention, layer {layer}",
            "source token (key)",
            f"step {step}: producing “{p.produced}”, looks at the source",
        )
        chart(cross, "play_cross", left, f"{name}_cross")
    self_ = playback_figs.head_rows_figure(
        p.self_row,
        p.self_keys,
        f"Decoder self-attention, layer {layer}",
        "earlier output token (key)",
        f"step {step}: reading “{p.read}”, looks at the tokens read so far",
    )
    chart(self_, "play_self", right, f"{name}_decoder-self")
    left, right = st.columns(2)
    if p.topk:
        bars = playback_figs.topk_figure([w for w, _ in p.topk], [q for _, q in p.topk])
        chart(bars, "play_topk", left, f"{name}_candidates")
    right.caption(f"Rows: the {maps.heads} heads of layer {layer} at step {step}. {how_read(page)}")
    write_url(state, ("step",))  # a fragment's own run does not reach the page's write_url
    player.rerun_if_stopped(PLAYER)


def how_read(page: SectionInputs) -> str:
    """What the maps of a step are: of the model generating its output, or of one teacher-forced
    pass over an output it was given (a typed translation, a token sequence)."""
    if page.translation.forced:
        return (
            "These are the maps of one teacher-forced pass over the given output: each step "
            "reads the tokens given before it, not what the model itself would have written."
        )
    return (
        "These are the maps of the decoder as it generated this output, step by step (not one "
        "teacher-forced pass over a reference)."
    )


def output_step(n_steps: int, state: ViewState) -> int:
    """The playback's output step slider (kept in the view state and the URL)."""
    state.step = min(state.step, n_steps - 1)
    if n_steps <= 1:
        return state.step
    widget_default("at_step", state.step)
    if st.session_state["at_step"] >= n_steps:
        st.session_state["at_step"] = n_steps - 1
    st.session_state["at_step"] = player.next_index(PLAYER, st.session_state["at_step"], n_steps)
    state.step = st.slider("Output step", 0, n_steps - 1, key="at_step")
    return state.step


def reference_input(state: ViewState) -> str:
    """The reference box (widget ``at_ref``), kept in the view state and the URL.

    Seeded from the view when the sentence changes, and when coming back to this section
    (Streamlit forgets a widget's value while it is not shown).
    """
    if st.session_state.get("at_ref_for") != state.sentence or "at_ref" not in st.session_state:
        st.session_state["at_ref"] = state.forced_reference()
        st.session_state["at_ref_for"] = state.sentence
    reference = bounded(
        st.text_input("Reference translation to feed in", key="at_ref"), "reference"
    )
    state.set_reference(reference)
    return reference


def forced_vs_free(page: SectionInputs) -> None:
    """The page's maps beside a teacher-forced pass over a reference translation: free-running
    maps of the model's own output, or, where the user typed a translation, the maps of the
    pass fed that translation."""
    maps, state, lm = page.pieces, page.state, page.lm
    typed = page.translation.forced  # the page's maps are of a pass fed the typed translation
    st.subheader("Your translation vs a reference" if typed else "Teacher-forced vs free-running")
    reference = reference_input(state)
    if not reference.strip():
        st.caption("Type a reference to see the decoder's maps when it is fed the reference.")
        return
    try:
        where = (page.entry.path, page.entry.mtime)
        forced = teacher_forced(lm, where, state.sentence, reference, False, state.target_lang)
    except TranslationError as e:
        st.error(md(e))
        return
    unknown = unknown_words(lm, reference)
    if unknown:
        st.caption(md("Not in the model's output vocabulary (fed as <unk>): " + ", ".join(unknown)))
    kind, layer, head = decoder_view(maps, state.kind, state.layer, state.head)
    left, right = st.columns(2)
    own = ("teacher-forced (your translation)", "typed") if typed else FREE_RUNNING
    for col, m, (what, name) in ((left, maps, own), (right, forced, FORCED_REFERENCE)):
        view = select_view(m, kind, layer, head, state.hide)
        view.title = f"{short_title(kind)}, {what}"
        file = export_name(state.model, state.sentence, kind, layer, head, name)
        chart(figs.view_figure(view), f"compare_{name}", col, file)
    st.caption(compare_words(typed))


FREE_RUNNING = ("free-running (the model's own output)", "free")  # (chart title, file tag)
FORCED_REFERENCE = ("teacher-forced (the reference)", "forced")


def compare_words(typed: bool) -> str:
    """What the two sides of the comparison are, in one caption."""
    if typed:
        return (
            "Left: one pass fed your translation (typed above) token by token. Right: one pass "
            "fed the reference. Both are teacher-forced: empty “Your translation” above to see "
            "the model's own output, decoded freely, on the left."
        )
    return (
        "Left: the maps of the model's own output. Right: one pass that feeds the "
        "reference token by token. They match where the reference equals the output."
    )
