"""Attention page: encoder, decoder and cross attention of one sentence, head by head."""

from __future__ import annotations

import streamlit as st

from core.attention import head_stats, token_pick
from core.attention.kinds import KINDS, kind_labels, reading_hint
from core.attention.maps import (
    SentenceMaps,
    blank_note,
    export_name,
    head_options,
    playback_step,
    select_view,
    view_csv,
)
from core.attention.view_state import SECTIONS, ViewState, clamp_view
from core.attention.word_maps import shown_maps
from core.corpus.text import D2L_TEST_PAIRS, tokenize
from core.figures import attention as figs
from core.figures import comparison as cmp_figs
from core.figures.training import training_curve_figure
from core.model.checkpoints import LoadedModel
from core.model.decode import Translation, TranslationError
from core.runs.catalogue import ModelEntry
from core.runs.history import open_history
from pages.ui.ablation_view import ablation_section
from pages.ui.cached import (
    probe_sentences,
    sentence_maps,
    snapshot_series,
    teacher_forced,
    translate,
)
from pages.ui.charts import chart
from pages.ui.compare_view import comparison_section
from pages.ui.frame import ensure_app_navigation, footer, link
from pages.ui.model_picker import pick_model
from pages.ui.text import code, md
from pages.ui.view_widgets import sentence_input, view_state, widget_default, write_url

URL_KEYS = (
    "model",
    "sentence",
    "beam",
    "alpha",
    "max_len",
    "kind",
    "layer",
    "head",
    "hide",
    "words",
    "section",
    "step",
    "ablate",
    "other",
    "other_sentence",
    "forced",
    "token",
)
KIND_SHORT = {"encoder": "Encoder self", "decoder_self": "Decoder self", "cross": "Cross"}
HEAD_WORDS = {"mean": "mean of heads", "max": "max of heads", "rollout": "rollout"}
FULL_GRID_CELLS = figs.FULL_GRID_CELLS  # models with at most this many cells show the full grid


def clamp_widget(key: str, value, options) -> None:
    """Reset a widget's value to ``value`` when it is not among ``options``."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = value if value in options else options[-1]


def view_controls(maps: SentenceMaps, state: ViewState, subword: bool) -> bool:
    """Kind, layer, head and display toggles; returns whether colours are stretched."""
    cols = st.columns([3, 1, 1.5])
    widget_default("at_kind", state.kind, KINDS)
    state.kind = cols[0].radio(
        "Attention kind",
        KINDS,
        key="at_kind",
        horizontal=True,
        format_func=lambda k: KIND_SHORT[k],
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
    return display_toggles(state, subword)


def display_toggles(state: ViewState, subword: bool) -> bool:
    """Hide <bos>/<eos>, merge pieces, stretch colours, on a row; returns the stretch."""
    row = st.container(horizontal=True, gap="large")
    if subword:
        widget_default("at_words", state.words)
        state.words = row.toggle(
            "Merge pieces into words",
            key="at_words",
            help="This model reads and writes BPE pieces (“##” continues a word). Merged, a "
            "word's column is the sum over its pieces and its row the mean of its pieces' "
            "rows, so rows still sum to 1. The decoding playback always shows pieces.",
        )
    else:
        state.words = False
    widget_default("at_hide", state.hide)
    state.hide = row.toggle(
        "Hide <bos>/<eos>",
        key="at_hide",
        help="Drops the <bos>/<eos> columns and renormalises each row. A row whose whole "
        "weight was on them is left blank (decoder self-attention: step 0 reads only <bos>).",
    )
    return row.toggle(
        "Stretch colours",
        key="at_stretch",
        help="Top of the colour scale at the 99th percentile instead of 1.",
    )


def head_summary(maps: SentenceMaps, state: ViewState) -> None:
    """Statistics and label of the chosen head."""
    if not state.head.isdigit():
        st.caption("Statistics are per head: pick a head number to see them.")
        return
    table = head_stats.head_table(maps, state.kind)
    row = table[(table["layer"] == state.layer) & (table["head"] == int(state.head))].iloc[0]
    st.markdown(f"**{row['label']}**")
    lines = [
        f"entropy {row['entropy']:.2f} nats",
        f"diagonal {row['diagonal']:.0%}",
        f"previous token {row['previous']:.0%}",
        f"on <eos> {row['eos']:.0%}",
    ]
    if "monotonicity" in row:
        lines.append(f"monotonicity {row['monotonicity']:.2f}")
    st.markdown("\n".join(f"- {x}" for x in lines))


def token_picker(maps: SentenceMaps, state: ViewState) -> token_pick.Highlight | None:
    """Pick a query row or key column to outline (URL ``token``); where it is drawn, or None."""
    queries, keys = maps.tokens(state.kind)
    options = token_pick.pick_options(queries, keys)
    left, right = st.columns([2, 3], vertical_alignment="bottom")
    if state.token and state.token not in options:
        right.caption(md(f"Token {state.token} (from the URL) is not in this map: none outlined."))
        state.token = ""
    widget_default("at_token", state.token, options)
    state.token = left.selectbox(
        "Outline a token",
        options,
        key="at_token",
        format_func=lambda v: token_pick.pick_label(v, queries, keys),
        help="A query (row) or key (column), counted with <bos>/<eos>. Clicks on a heatmap "
        "cannot select it here (Streamlit does not pass them on), so pick it from this list.",
    )
    pick = token_pick.resolve_pick(state.token, queries, keys, state.hide)
    if pick is not None:
        done = f"{pick.label}: outlined in the large map and in every cell of the overview"
        right.caption(md(f"Not outlined: {pick.problem}." if pick.problem else f"{done}."))
    return pick


def maps_section(maps: SentenceMaps, state: ViewState, stretch: bool) -> None:
    """The chosen head large, the overview grid and the head statistics."""
    view = select_view(maps, state.kind, state.layer, state.head, state.hide)
    name = export_name(state.model, state.sentence, state.kind, state.layer, state.head)
    pick = token_picker(maps, state)
    left, right = st.columns([4, 1])
    chart(cmp_figs.add_highlight(figs.view_figure(view, stretch), pick), "big", left, name)
    with right:
        head_summary(maps, state)
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
    n_layers = maps.layers(state.kind)
    show_all = n_layers * maps.heads <= FULL_GRID_CELLS or st.toggle(
        f"Overview of all {n_layers} layers × {maps.heads} heads", key="at_all_layers"
    )
    layers = None if show_all else [state.layer]
    grid = figs.grid_view_figure(maps, state.kind, state.hide, layers, stretch)
    layer = None if show_all else state.layer
    name = export_name(state.model, state.sentence, state.kind, layer, None, "grid")
    chart(cmp_figs.add_highlight(grid, pick), "grid", name=name)
    st.markdown("**Head statistics** (per layer and head; labels are simple rules of thumb)")
    st.dataframe(
        head_stats.head_table(maps, state.kind),
        hide_index=True,
        column_config={
            name: st.column_config.NumberColumn(format="%.2f")
            for name in ("entropy", "diagonal", "previous", "eos", "bos", "monotonicity")
        },
    )
    st.caption(
        "entropy: spread of each row (nats); diagonal / previous / eos / bos: mean "
        "weight on that key; monotonicity: rank correlation of output position with "
        "its most-attended source position (cross only)."
    )


def output_step(n_steps: int, state: ViewState) -> int:
    """The playback's output step slider (kept in the view state and the URL)."""
    state.step = min(state.step, n_steps - 1)
    if n_steps <= 1:
        return state.step
    widget_default("at_step", state.step)
    if st.session_state["at_step"] >= n_steps:
        st.session_state["at_step"] = n_steps - 1
    state.step = st.slider("Output step", 0, n_steps - 1, key="at_step")
    return state.step


def playback_section(
    t: Translation, maps: SentenceMaps, state: ViewState, lm: LoadedModel, key: tuple
) -> None:
    """Step through decoding as it happened; compare with a teacher-forced reference."""
    layer = min(state.layer, maps.layers("cross") - 1)
    step = output_step(len(maps.output_tokens), state)
    p = playback_step(maps, t.topk, step, layer)
    done = " ".join(p.prefix[:-1])
    st.markdown(
        f"Step {step}: reads {code(p.read)}, produces **{code(p.produced)}** — so far: "
        f"{md(done)} **{md(p.produced)}**"
    )
    name = export_name(state.model, state.sentence, None, layer, None, f"step {step}")
    left, right = st.columns(2)
    cross = figs.head_rows_figure(
        p.cross,
        p.src_tokens,
        f"Cross attention, layer {layer}",
        "source token (key)",
        f"step {step}: producing “{p.produced}”, looks at the source",
    )
    chart(cross, "play_cross", left, f"{name}_cross")
    self_ = figs.head_rows_figure(
        p.self_row,
        p.self_keys,
        f"Decoder self-attention, layer {layer}",
        "earlier output token (key)",
        f"step {step}: reading “{p.read}”, looks at the tokens read so far",
    )
    chart(self_, "play_self", right, f"{name}_decoder-self")
    left, right = st.columns(2)
    if p.topk:
        bars = figs.topk_figure([w for w, _ in p.topk], [q for _, q in p.topk])
        chart(bars, "play_topk", left, f"{name}_candidates")
    right.caption(
        f"Rows: the {maps.heads} heads of layer {layer} at step {step}. These are the "
        "maps of the decoder as it generated this output, step by step (not one "
        "teacher-forced pass over a reference)."
    )
    compare_section(maps, state, lm, key)


def default_reference(sentence: str) -> str:
    """A reference for the sentence: a picked validation example's, or the d2l book's."""
    picked = st.session_state.get("references", {})
    book = {s: r for s, r in D2L_TEST_PAIRS}
    return picked.get(sentence) or book.get(" ".join(sentence.lower().split()), "")


def compare_section(maps: SentenceMaps, state: ViewState, lm: LoadedModel, key: tuple) -> None:
    """Free-running maps beside a teacher-forced pass over a reference translation."""
    st.subheader("Teacher-forced vs free-running")
    if st.session_state.get("at_ref_for") != state.sentence:
        st.session_state["at_ref"] = default_reference(state.sentence)
        st.session_state["at_ref_for"] = state.sentence
    reference = st.text_input("Reference translation (French) to feed in", key="at_ref")
    if not reference.strip():
        st.caption("Type a reference to see the decoder's maps when it is fed the reference.")
        return
    try:
        forced = teacher_forced(lm, key, state.sentence, reference)
    except TranslationError as e:
        st.error(md(e))
        return
    unknown = lm.tgt_vocab.unknown(tokenize(reference))
    if unknown:
        st.caption(md("Not in the model's French vocabulary (fed as <unk>): " + ", ".join(unknown)))
    kind = state.kind if state.kind != "encoder" else "cross"
    head = state.head if state.head in head_options(kind, maps.heads) else "mean"
    layer = min(state.layer, maps.layers(kind) - 1)
    left, right = st.columns(2)
    for col, m, what, name in (
        (left, maps, "free-running (the model's own output)", "free"),
        (right, forced, "teacher-forced (the reference)", "forced"),
    ):
        view = select_view(m, kind, layer, head, state.hide)
        view.title = f"{kind_labels(kind)[0].split(' (')[0]}, {what}"
        file = export_name(state.model, state.sentence, kind, layer, head, name)
        chart(figs.view_figure(view), f"compare_{name}", col, file)
    st.caption(
        "Left: the maps of the model's own output. Right: one pass that feeds the "
        "reference token by token. They match where the reference equals the output."
    )


def training_section(entry: ModelEntry, state: ViewState, stretch: bool) -> None:
    """Replay a probe sentence's attention over the training steps of the model's run."""
    source = entry.history
    steps = tuple(open_history(source).snapshot_steps()) if source else ()
    if not steps:
        st.info(
            "This model has no recorded attention snapshots. Runs trained from the Train "
            "page save the probe sentences' maps at every evaluation, and a model saved "
            "from a run keeps them in a .history file beside it."
        )
        return
    probes = probe_sentences(source, steps)
    if not probes:
        st.info("The snapshots of this run cannot be read.")
        return
    clamp_widget("at_probe", state.sentence if state.sentence in probes else probes[0], probes)
    probe = st.selectbox(
        "Probe sentence",
        probes,
        key="at_probe",
        help="The run recorded the maps of these sentences at each evaluation.",
    )
    series = snapshot_series(source, probe, steps)
    if series.skipped:
        st.warning("Some snapshots could not be read: " + md(", ".join(series.skipped)))
    if not series.frames:
        st.info(f"No snapshot holds “{md(probe)}”.")
        return
    clamp_widget("at_train_step", series.steps[-1], series.steps)
    step = st.select_slider("Training step", series.steps, key="at_train_step")
    frame = series.frames[series.steps.index(step)]
    shown = shown_maps(frame.maps, state.words)
    cols = st.columns(4)
    cols[0].metric("Step", f"{step:,}")
    for col, name, value in (
        (cols[1], "Training loss", frame.loss),
        (cols[2], "Validation loss", frame.val_loss),
        (cols[3], "Validation BLEU", frame.val_bleu),
    ):
        col.metric(
            name, "—" if value is None else f"{value:.3f}" if "loss" in name else f"{value:.1f}"
        )
    st.markdown(f"Output at this step: **{md(' '.join(shown.output_tokens))}**")
    layer = min(state.layer, shown.layers(state.kind) - 1)
    view = select_view(shown, state.kind, layer, state.head, state.hide)
    view.title += f" — training step {step:,}"
    name = export_name(state.model, probe, state.kind, layer, state.head, f"training step {step}")
    left, right = st.columns([3, 2])
    chart(figs.view_figure(view, stretch), "train_big", left, name)
    curve = training_curve_figure(source, step)
    chart(curve, "train_curve", right, export_name(state.model, "", what="training curve"))
    small = shown.layers(state.kind) * shown.heads <= FULL_GRID_CELLS
    grid_layers = None if small else [layer]
    grid = figs.grid_view_figure(shown, state.kind, state.hide, grid_layers, stretch)
    what = f"grid training step {step}"
    grid_name = export_name(state.model, probe, state.kind, None if small else layer, None, what)
    chart(grid, "train_grid", name=grid_name)


def main() -> None:
    """Build the page."""
    ensure_app_navigation()
    st.title("Attention")
    state = view_state()
    picked = pick_model(state, "at")
    if picked is None:
        write_url(state, ("sentence",))
        footer()
        return
    entry, lm = picked
    sentence_input(state, "at")
    settings = state.settings()
    try:
        t = translate(lm, entry.path, entry.mtime, state.sentence, settings)
    except TranslationError as e:
        st.error(md(e))
        write_url(state, URL_KEYS)
        footer()
        return
    key = (entry.path, entry.mtime, state.sentence, settings)
    pieces = sentence_maps(t, key)
    mode = "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}"
    st.markdown(f"**Translation ({mode}):** {md(t.text) or '(empty)'}")
    for w in t.warnings:
        st.warning(md(w))
    link(
        "translate.py",
        "Change decoding on the Translate page",
        state.to_query(("model", "sentence", "beam", "alpha", "max_len")),
    )
    clamp_view(state, pieces)
    stretch = view_controls(pieces, state, lm.subword)
    maps = sentence_maps(t, key, state.words)
    widget_default("at_section", state.section, SECTIONS)
    state.section = st.radio("Show", SECTIONS, key="at_section", horizontal=True)
    st.caption(reading_hint(state.kind))
    if state.section == SECTIONS[0]:
        maps_section(maps, state, stretch)
    elif state.section == SECTIONS[1]:
        playback_section(t, pieces, state, lm, key[:2])
    elif state.section == SECTIONS[2]:
        training_section(entry, state, stretch)
    elif state.section == SECTIONS[3]:
        ablation_section(entry, lm, t, maps, state, stretch)
    else:
        comparison_section(entry, lm, t, maps, state, stretch)
    write_url(state, URL_KEYS)
    footer()


main()
