"""Attention page, "Compare" section: two models on one sentence, or two sentences on one model."""

from __future__ import annotations

import streamlit as st

from core.attention import comparison as compare
from core.attention.kinds import kind_labels
from core.attention.maps import export_name
from core.attention.sentence_maps import SentenceMaps
from core.attention.token_pick import resolve_pick
from core.attention.word_maps import merged
from core.corpus.text import D2L_TEST_PAIRS
from core.figures import attention as figs
from core.figures import comparison as cmp_figs
from core.model.checkpoints import CheckpointError
from core.model.interface import TranslationModel
from core.model.parts import Translation, TranslationError
from core.runs.catalogue import ModelEntry, compared_entry, find_entry, translators
from pages.ui.attention.controls import all_layers_toggle
from pages.ui.attention.inputs import SectionInputs
from pages.ui.cached import sentence_maps, teacher_forced, translate
from pages.ui.charts import chart
from pages.ui.model_picker import load_model, model_entries
from pages.ui.text import code, md, spreadsheet_safe
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import bounded, widget_default

MODES = ("two models", "two sentences")
PAIR_FIELDS = {MODES[0]: "other", MODES[1]: "other_sentence"}  # the ViewState field of a mode


def comparison_section(page: SectionInputs) -> None:
    """Two models or two sentences side by side, with the difference of their maps."""
    state = page.state
    first = MODES[1] if state.other_sentence and not state.other else MODES[0]
    widget_default("cmp_mode", first, MODES)
    mode = st.radio("Compare:", MODES, key="cmp_mode", horizontal=True)
    _keep_mode_field(state, mode)
    shown = (page.entry, page.lm, page.translation, page.maps, state, page.stretch)
    if mode == MODES[0]:
        two_models(*shown)
    else:
        two_sentences(*shown)


def _keep_mode_field(state: ViewState, mode: str) -> None:
    """Only the chosen mode's field travels in the URL; the other's is kept for a switch back."""
    saved = st.session_state.setdefault("cmp_saved", {})
    for other_mode, name in PAIR_FIELDS.items():
        if other_mode != mode and getattr(state, name):
            saved[name] = getattr(state, name)
            setattr(state, name, "")
    name = PAIR_FIELDS[mode]
    if not getattr(state, name):
        setattr(state, name, saved.get(name, ""))


def pick_other(entry: ModelEntry, lm: TranslationModel, state: ViewState) -> ModelEntry | None:
    """The compared model B (widget ``cmp_other``): any other model of the catalogue that
    translates, the studio's own or a Hugging Face one (then both are compared word by word);
    by default another translator of A's direction (``catalogue.compared_entry``); None until
    one is picked where no other model translates A's direction."""
    entries = model_entries()
    usable = translators(entries, entry)
    if not usable:
        st.info(
            "There is no other model to compare with: train one on the Train page (its "
            "best.pt and last.pt are listed here), or compare two sentences instead."
        )
        return None
    by_key = {e.key: e for e in usable}
    auto = st.session_state.get("cmp_auto")  # (A, B): the B this view chose for A itself
    if auto and auto[0] != entry.key and state.other == auto[1] and "other" not in state.asked:
        state.other = ""  # model A changed: its own default, not the last A's
        st.session_state.pop("cmp_other", None)
    chosen = find_entry(usable, state.other) or compared_entry(entries, entry, lm.languages)
    if not state.other:
        st.session_state["cmp_auto"] = (entry.key, getattr(chosen, "key", None))
    if state.other and state.other != getattr(chosen, "key", None):
        _say_gone(state, chosen)
    if chosen is None:
        st.info(md(no_same_direction(lm)))
    widget_default("cmp_other", getattr(chosen, "key", None), list(by_key))
    picked = st.selectbox(
        "Model B (compared with the model above, A)",
        list(by_key),
        key="cmp_other",
        format_func=lambda k: by_key[k].label,
        placeholder="Pick a model B",
        help="Any model of the catalogue that translates, including the best.pt and last.pt "
        "of a run; it opens on another of A's direction, where there is one.",
    )
    state.other = picked or ""
    return by_key.get(picked)


def _say_gone(state: ViewState, chosen: ModelEntry | None) -> None:
    """Say that the model B asked for (``state.other``) is not among those offered."""
    gone = "not found, cannot be used, does not translate or is model A itself"
    if "other" in state.asked:  # from a link: said in its note (link_note)
        state.why["other"] = gone
    elif chosen is not None:
        st.warning(f"Model {code(state.other)} was {gone}: comparing with {code(chosen.key)}.")
    else:
        st.warning(f"Model {code(state.other)} was {gone}.")


def no_same_direction(lm: TranslationModel) -> str:
    """One line: no other model translates A's direction, and what to do instead."""
    source, target_name = lm.language_names
    return (
        f"No other model translates {source}→{target_name}: compare two sentences on this "
        "model instead (Compare: two sentences, above), or pick a model B of another "
        "direction below (it would read this sentence as unknown words)."
    )


def other_translation(other: ModelEntry, state: ViewState):
    """(TranslationModel, Translation) of model B, or None with a message."""
    try:
        lm_b = load_model(other.path, other.mtime)
    except CheckpointError as e:
        st.error(f"Model B cannot be loaded: {md(e)}")
        return None
    settings = state.settings()
    try:
        t_b = translate(lm_b, other.path, other.mtime, state.sentence, settings)
    except TranslationError as e:
        st.error(f"Model B cannot translate this sentence: {md(e)}")
        return None
    return lm_b, t_b


def two_models(
    entry: ModelEntry,
    lm: TranslationModel,
    t: Translation,
    maps: SentenceMaps,
    state: ViewState,
    stretch: bool,
) -> None:
    """Model A (the page's) and model B on the same sentence: translations, maps, B − A."""
    other = pick_other(entry, lm, state)
    loaded = other and other_translation(other, state)
    if not loaded:
        return
    lm_b, t_b = loaded
    st.caption(md(f"A = {entry.key} · B = {other.key}"))
    words = state.words or compare.cut_differently(lm, lm_b)
    if words and not state.words:
        st.caption(
            "A and B cut sentences into different pieces (their tokenizers differ): both are "
            "compared word by word, each word's pieces merged."
        )
    maps = merged(maps) if words else maps
    key_b = (other.path, other.mtime, state.sentence, state.settings())
    maps_b = sentence_maps(t_b, key_b, words)
    translations(("A", t, ""), ("B", t_b, ""))
    topk_table(t, t_b, export_name(state.model, state.sentence, what="candidates vs other"))
    models = ((entry, lm, maps), (other, lm_b, maps_b))
    forced = same_rows(models, t, t_b, state, words)
    if forced is None:
        return
    note = compare.size_note(*forced, state.kind)
    if note:
        st.info(md(note))
    # two tokenizers name their tokens apart (</s> and <eos>, a word one knows and one reads
    # as <unk>): then rows and columns are matched by token, as for two sentences
    across = compare.cut_differently(lm, lm_b)
    pair_maps(*forced, state, stretch, by_token=across)


def same_rows(models, t: Translation, t_b: Translation, state: ViewState, words: bool):
    """(maps A, maps B) with the same rows: free-running, or both forced on one output."""
    (entry, lm, maps), (other, lm_b, maps_b) = models
    if state.kind == "encoder":
        return maps, maps_b  # the source is the same; the decoders' outputs do not matter
    st.caption(md(compare.outputs_note(maps.output_tokens, maps_b.output_tokens)))
    if maps.output_tokens == maps_b.output_tokens:
        return maps, maps_b
    outputs = {"A": t.text, "B": t_b.text}
    widget_default("cmp_forced", state.forced, list(outputs))
    state.forced = which = st.radio(
        "Feed both decoders",
        list(outputs),
        key="cmp_forced",
        horizontal=True,
        format_func=lambda k: md(f"{k}'s output: {outputs[k] or '(empty)'}"),  # labels are Markdown
    )
    which, note = compare.fed_output(outputs, which)
    if note:
        st.info(md(note))
    if which is None:
        return None
    reference = outputs[which]
    try:
        pair = tuple(
            teacher_forced(
                m, (e.path, e.mtime), state.sentence, reference, words, target(m, state.target_lang)
            )
            for e, m in ((entry, lm), (other, lm_b))
        )
    except TranslationError as e:
        st.error(md(e))
        return None
    unknown = {k: compare.unknown_words(m, reference) for k, m in (("A", lm), ("B", lm_b))}
    st.caption(
        md(
            f"Both decoders read {which}'s output “{reference}” (teacher forcing); "
            f"{which}'s maps are then its own free-running ones (up to a final <eos>)."
            + "".join(
                f" Not in {k}'s output vocabulary (fed as unknown): {', '.join(w)}."
                for k, w in unknown.items()
                if w
            )
        )
    )
    return pair


def target(lm, chosen: str) -> str:
    """The target language the page chose, for a multilingual model that has it ("" else)."""
    return chosen if chosen in lm.language_codes() else ""


def two_sentences(
    entry: ModelEntry,
    lm: TranslationModel,
    t: Translation,
    maps: SentenceMaps,
    state: ViewState,
    stretch: bool,
) -> None:
    """Sentence A (the page's) and sentence B on the same model, aligned by shared tokens."""
    suggestion = compare.suggest_sentence(state.sentence, [s for s, _ in D2L_TEST_PAIRS])
    widget_default("cmp_sentence", state.other_sentence or suggestion)
    label = lm.source_label.replace("Source", "source")  # "English" stays a proper noun
    state.other_sentence = bounded(st.text_input(f"Second {label} (B)", key="cmp_sentence"), label)
    if not state.other_sentence.strip():
        st.caption("Type a second sentence to compare its maps with the first one's.")
        return
    settings = state.settings()
    try:
        t_b = translate(lm, entry.path, entry.mtime, state.other_sentence, settings)
    except TranslationError as e:
        st.error(f"Sentence B cannot be translated: {md(e)}")
        return
    maps_b = sentence_maps(
        t_b, (entry.path, entry.mtime, state.other_sentence, settings), state.words
    )
    translations(("A", t, state.sentence), ("B", t_b, state.other_sentence))
    topk_table(t, t_b, export_name(state.model, state.sentence, what="candidates vs sentence"))
    st.caption(
        "Aligned by token: every row and column of both sentences is shown. Tokens both "
        "have are matched in order (each occurrence of a repeated word pairs with at most "
        "one in the other sentence); between them, a word swapped for one word is paired "
        "and labelled “A's ≠ B's”, and every other word is labelled "
        "“(A only)” or “(B only)”: grey in the other sentence's map and in B − A. "
        "Weights are as each sentence's own pass computed them. Decoder rows are each "
        "sentence's own output tokens."
    )
    pair_maps(maps, maps_b, state, stretch, by_token=True)


def translations(*sides: tuple[str, Translation, str]) -> None:
    """The translations side by side: (name, translation, its source sentence or "")."""
    for col, (name, tr, source) in zip(st.columns(len(sides)), sides):
        said = f"{md(source)} → " if source else ""
        col.markdown(f"**{name}:** {said}{md(tr.text) or '(empty)'}")
        for w in tr.warnings:
            col.warning(md(w))


def topk_table(t_a: Translation, t_b: Translation, name: str) -> None:
    """Both outputs step by step with their next-token candidates, and a CSV of it."""
    frame = compare.topk_pair_frame(t_a, t_b)
    with st.expander("Output tokens and next-token candidates, step by step"):
        st.dataframe(spreadsheet_safe(frame), hide_index=True)
        st.download_button(
            "Candidates as CSV",
            compare.frame_csv(frame),
            mime="text/csv",
            file_name=f"{name}.csv",
            key="cmp_topk_csv",
        )


def only_in(pair: compare.PairView, kind: str) -> None:
    """The tokens each side has and the other lacks at that place (marked in the maps)."""
    _, query_words, key_words = kind_labels(kind)
    axes = (
        (("query", "source tokens"),)
        if kind == "encoder"
        else (("query", query_words), ("key", key_words))
    )
    lines = []
    for side, only in (("A", pair.only_a), ("B", pair.only_b)):
        parts = [f"{words}: {', '.join(only[axis])}" for axis, words in axes if only[axis]]
        if parts:
            lines.append(f"Only in {side} — " + "; ".join(parts) + ".")
    st.caption(md(" ".join(lines)) if lines else "Every token is in both sentences.")


def pair_maps(
    maps_a: SentenceMaps, maps_b: SentenceMaps, state: ViewState, stretch: bool, by_token: bool
) -> None:
    """A's and B's map of the chosen view side by side, B − A below, and B − A of every head."""
    try:
        pair = compare.pair_view(
            maps_a, maps_b, state.kind, state.layer, state.head, state.hide, by_token
        )
    except compare.CompareError as e:
        st.warning(md(e))
        return
    layer, head = compare.common_view(maps_a, maps_b, state.kind, state.layer, state.head)
    if (layer, head) != (state.layer, state.head):
        st.caption(f"Showing layer {layer}, head {head}: the chosen one is not in both models.")
    if by_token:
        only_in(pair, state.kind)
    pick = None if by_token else resolve_pick(state.token, *maps_a.tokens(state.kind), state.hide)
    name = export_name(state.model, state.sentence, state.kind, layer, head, "compare")
    zmax = max(figs.percentile_cap(v.weights) for v in (pair.a, pair.b)) if stretch else 1.0
    title = f"{compare.DIFF_WORDS}: {pair.a.title}"
    for col, side, view in zip(st.columns(2), "AB", (pair.a, pair.b)):
        view.title = f"{side}: {view.title}"
        fig = cmp_figs.add_highlight(figs.view_figure(view, zmax=zmax), pick)
        chart(fig, f"cmp_{side}", col, f"{name}_{side.lower()}")
    diff = cmp_figs.diff_figure(
        pair.diff, pair.a.query_tokens, pair.a.key_tokens, state.kind, title, pair.a.note, stretch
    )
    chart(cmp_figs.add_highlight(diff, pick), "cmp_diff", name=f"{name}_difference")
    if pair.largest < compare.SAME_WITHIN:
        st.caption(
            f"B − A is below {compare.SAME_WITHIN:g} in every cell: the two maps are the same."
        )
    row = st.container(horizontal=True, vertical_alignment="center")
    row.download_button(
        "A, B and B − A as CSV",
        compare.pair_csv(pair),
        mime="text/csv",
        file_name=f"{name}.csv",
        key="cmp_csv",
        help="One line per compared cell: A's weight, B's weight and B − A.",
    )
    if pick is not None:
        row.caption(
            md(f"Not outlined: {pick.problem}" if pick.problem else f"Outlined: {pick.label}")
        )
    difference_grid(maps_a, maps_b, state, stretch, by_token, pick)


def difference_grid(
    maps_a: SentenceMaps,
    maps_b: SentenceMaps,
    state: ViewState,
    stretch: bool,
    by_token: bool,
    pick,
) -> None:
    """B − A of every layer × head both have (one layer when that is many cells)."""
    layers, heads = compare.common_size(maps_a, maps_b, state.kind)
    chosen = None
    if not figs.shows_full_grid(layers, heads) and not all_layers_toggle(
        state, "cmp_all_layers", f"Differences of all {layers} layers × {heads} heads"
    ):
        chosen = [min(state.layer, layers - 1)]
    try:
        grid = compare.pair_grid(maps_a, maps_b, state.kind, state.hide, chosen, by_token)
    except compare.CompareError as e:
        st.warning(md(e))
        return
    fig = cmp_figs.diff_grid_figure(
        grid.diff, grid.query_tokens, grid.key_tokens, state.kind, grid.layers, grid.note, stretch
    )
    layer = None if chosen is None else chosen[0]
    name = export_name(state.model, state.sentence, state.kind, layer, None, "grid difference")
    chart(cmp_figs.add_highlight(fig, pick), "cmp_grid", name=name)
