"""Translate page: pick a model, translate a sentence, see its tokens and candidates."""

from __future__ import annotations

import streamlit as st

from core.command_line import shell_word
from core.model import d2l_check
from core.model.checked_translation import (
    first_choices,
    target_frame,
    topk_frame,
    translation_record,
)
from core.model.interface import TranslationModel
from core.model.parts import (
    ALPHAS,
    BEAM_SIZES,
    MAX_LENS,
    DecodeSettings,
    Translation,
    TranslationError,
)
from core.runs.catalogue import ModelEntry
from pages.ui.attention.sequence_read import sequence_input, sequence_line
from pages.ui.cached import translate, validation_examples
from pages.ui.frame import ensure_app_navigation, link, model_footer
from pages.ui.model_picker import pick_model
from pages.ui.text import code, md, spreadsheet_safe
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import (
    TRANSLATE_KEYS,
    link_note,
    prompt_template,
    sentence_input,
    target_input,
    target_language,
    view_state,
    widget_default,
    write_url,
)

PROMPTED = (
    "A decoder-only language model translates by prompting: it reads the template below with "
    "your sentence in it and continues the text; what it writes up to the end of the line is "
    "the translation (greedy)."
)


def decode_settings(state: ViewState) -> DecodeSettings:
    """Greedy or beam search, with beam size, length penalty and maximum length."""
    cols = st.columns([2, 1, 1, 1])
    widget_default("tr_mode", "Beam search" if state.beam > 1 else "Greedy")
    mode = cols[0].radio("Decoding", ["Greedy", "Beam search"], key="tr_mode", horizontal=True)
    beam = state.beam if state.beam > 1 else 4
    widget_default("tr_beam", beam)
    widget_default("tr_alpha", float(state.alpha))
    widget_default("tr_max_len", int(state.max_len))
    most = BEAM_SIZES[1]
    beam = cols[1].number_input("Beam size", 2, most, key="tr_beam", disabled=mode == "Greedy")
    alpha = cols[2].number_input(
        "Length penalty α",
        *ALPHAS,
        step=0.1,
        key="tr_alpha",
        disabled=mode == "Greedy",
        help="GNMT ((5 + length) / 6) ** α",
    )
    max_len = cols[3].number_input("Max output length", *MAX_LENS, key="tr_max_len")
    state.beam = int(beam) if mode == "Beam search" else 1
    state.alpha, state.max_len = float(alpha), int(max_len)
    return state.settings()


ONE_PASS_WORDS = (
    "This model writes no output step by step: it has no greedy or beam search to choose."
)


def no_decoding(state: ViewState) -> DecodeSettings:
    """The settings of a model that fills its output in one pass: no decoding widgets, and
    beam 1 (a link's beam is named in its note)."""
    if state.beam != 1 and "beam" in state.asked:
        state.why["beam"] = "this model writes no output step by step"
    state.beam = 1
    st.caption(ONE_PASS_WORDS)
    return state.settings()


def choose_validation(lm: TranslationModel, state: ViewState) -> None:
    """Optionally pick a validation sentence; shows its reference translations."""
    if not st.toggle("Pick a validation sentence", key="tr_use_val"):
        return
    data_key = repr(sorted((lm.meta.get("data_config") or {}).items()))
    examples, reason = validation_examples(lm.meta, data_key)
    if not examples:
        st.info(f"No validation sentences to offer: {md(reason)}.")
        return
    sources = [e.source for e in examples]

    def use_example() -> None:
        if st.session_state["tr_val"]:
            st.session_state["tr_sentence"] = st.session_state["tr_val"]
            state.set_sentence(st.session_state["tr_val"])

    if st.session_state.get("tr_val") not in sources:
        st.session_state["tr_val"] = state.sentence if state.sentence in sources else None
    picked = st.selectbox(
        f"Validation sentence ({len(sources)} spread over the split)",
        sources,
        key="tr_val",
        on_change=use_example,
        placeholder="Choose a sentence",
    )
    if picked:
        refs = next(e.references for e in examples if e.source == picked)
        if picked == state.sentence:
            state.reference = refs[0]  # the Attention page forces it (it travels in the URL)
        st.markdown("**References:** " + " · ".join(code(r) for r in refs))


def badge(token: str, color: str) -> str:
    """A Markdown badge showing a token literally."""
    return f":{color}-badge[{md(token)}]"


def show_translation(
    t: Translation,
    state: ViewState,
    pieces: str = "BPE",
    label: str = "Translation",
    decoded: bool = True,
) -> None:
    """The translation, its source tokens (unknown marked), warnings and candidates;
    ``decoded`` False: an output filled in one pass, with no decoding steps to count."""
    st.subheader(label)
    st.markdown(f"### {md(t.text) or '(empty output)'}")
    shown = translation_record(t, state.settings(), decoded)  # what `core.translate --json` prints
    steps = f"{shown['steps']} decoder steps · " if decoded else ""
    st.caption(f"log-probability {shown['log_prob']:.2f} · {steps}{shown['decoding']}")
    for w in t.warnings:
        st.warning(md(w))
    tokens = [
        badge(tok, "red" if unk else "gray" if tok.startswith("<") else "blue")
        for tok, unk in zip(t.src_tokens, t.src_unknown)
    ]
    st.markdown("**Source tokens as the model saw them:** " + " ".join(tokens))
    if any(tok.startswith("##") for tok in t.src_tokens):
        st.caption(
            md(f"This model reads {pieces} pieces: a piece starting with ## continues the word.")
        )
    if any(t.src_unknown):
        st.caption("Red: not in the model's vocabulary, fed to the model as <unk>.")
    if decoded:
        st.markdown("**Top candidates at each output step** (probability of the next token)")
    else:  # every mask filled at once: a candidate is a word for that mask, not a next token
        st.markdown("**Top candidates for each mask** (probability of the word in its place)")
    st.dataframe(spreadsheet_safe(topk_frame(t)), hide_index=True)
    link("attention.py", "Inspect its attention →", state.to_query())


def show_target(
    lm: TranslationModel, entry: ModelEntry, own: Translation, state: ViewState
) -> None:
    """The translation the user typed, teacher-forced: each token's probability and rank
    beside the model's own first choice, and both log-probabilities."""
    st.subheader("Your translation, as the model rates it")
    try:
        t = translate(lm, entry.path, entry.mtime, state.sentence, state.settings(), state.target)
    except TranslationError as e:
        st.error(md(e))
        return
    for w in t.warnings:
        st.warning(md(w))
    st.markdown(
        f"log-probability **{t.log_prob:.2f}** (the model's own translation: "
        f"{own.log_prob:.2f}) · {first_choices(t)} of {len(t.ranks)} tokens are the model's "
        "first choice"
    )
    st.dataframe(
        spreadsheet_safe(target_frame(t)),
        hide_index=True,
        column_config={"rank": st.column_config.NumberColumn(help="1 = the model's own choice")},
    )
    link("attention.py", "Explain it on the Attention page →", state.to_query())


def translation_of(
    lm: TranslationModel, entry: ModelEntry, state: ViewState, settings: DecodeSettings
) -> None:
    """The model's translation, and the user's own rated beside it; an error in one line."""
    try:
        t = translate(lm, entry.path, entry.mtime, state.sentence, settings)
    except TranslationError as e:
        st.error(md(e))
        return
    show_translation(t, state, lm.pieces_name, lm.output_label, lm.supports("decoding") is None)
    if state.target:
        show_target(lm, entry, t, state)


def sequence_of(lm: TranslationModel, entry: ModelEntry, state: ViewState, no_sentence: str):
    """A model that reads a token sequence (``supports("sentence")``: one trained here on the
    induction task) continues no sentence: its box is the sequence, read in one teacher-forced
    pass, each token's probability and rank shown, as the Attention page reads it."""
    typed = sequence_input(lm, state, "tr", no_sentence)
    state.beam = 1  # one forced pass: nothing is decoded
    if typed is None:  # a paste past the box's limit was named once
        return
    try:
        t = translate(lm, entry.path, entry.mtime, "", state.settings(), state.sentence)
    except TranslationError as e:
        st.error(md(e))
        return
    st.subheader("How the model reads the sequence")
    sequence_line(lm, t, maps=False)  # no maps on this page
    for w in t.warnings:
        st.warning(md(w))
    st.dataframe(
        spreadsheet_safe(target_frame(t)),
        hide_index=True,
        column_config={"rank": st.column_config.NumberColumn(help="1 = the model's own choice")},
    )
    command = f"python -m core.translate --checkpoint {shell_word(entry.key)} --target SEQUENCE ''"
    st.caption(f"{code(command)} prints each token's probability and rank.")
    link("attention.py", "Inspect its attention →", state.to_query())


def d2l_section(lm: TranslationModel, entry: ModelEntry, settings: DecodeSettings) -> None:
    """One click: the d2l chapter's four sentences, in the model's direction, with BLEU
    against the other side of the book's pairs."""
    st.subheader("The d2l.ai chapter's check")
    sources = ", ".join(f"“{s}”" for s, _ in d2l_check.d2l_pairs(lm))
    st.caption(
        md(
            f"Runs {d2l_check.d2l_direction(lm)}: translates {sources} and scores them against "
            + (
                "the book's English sentences (its pairs reversed)."
                if d2l_check.reversed_direction(lm)
                else "the book's references."
            )
        )
    )
    key = (entry.key, entry.mtime, settings)
    if st.button("Run the d2l check", key="tr_d2l"):
        st.session_state["d2l"] = (key, d2l_check.d2l_check(lm, settings))
    saved = st.session_state.get("d2l")
    if saved and saved[0] == key:
        check = saved[1]
        grams = "" if check.order == 4 else f", up to {check.order}-grams"
        st.metric(f"Corpus BLEU (sacreBLEU{grams})", f"{check.bleu:.1f}")
        st.dataframe(
            spreadsheet_safe(check.rows),
            hide_index=True,
            column_config={"bleu": st.column_config.NumberColumn("BLEU (d2l, k=2)", format="%.3f")},
        )


def main() -> None:
    """Build the page."""
    ensure_app_navigation()
    st.title("Translate")
    st.caption(
        "Translate with a trained model: the d2l.ai encoder-decoder Transformer (chapter 11.7), "
        "English → French or French → English, or any model the studio opens."
    )
    state = view_state()
    picked = pick_model(state, "tr")
    if picked is not None:
        entry, lm = picked
        if no_sentence := lm.supports("sentence"):  # it reads a token sequence, no sentence
            sequence_of(lm, entry, state, no_sentence)
            link_note(state, TRANSLATE_KEYS)
            write_url(state, TRANSLATE_KEYS)
            model_footer(lm)
            return
        if not lm.supports("template"):  # it translates by a prompt template
            st.caption(PROMPTED)
        choose_validation(lm, state)
        target_language(lm, state, "tr")
        prompt_template(lm, state, "tr")
        typed = sentence_input(state, "tr", lm.source_label, lm.example_sentence)
        settings = decode_settings(state) if lm.supports("decoding") is None else no_decoding(state)
        if problem := lm.supports("force"):  # a model that does not translate has nothing to rate
            state.target, state.why["target"] = "", problem
        else:
            target_input(state, "tr", lm.target_name)
        if typed is not None:  # a paste past the box's limit was named once: nothing to do
            translation_of(lm, entry, state, settings)
        if problem := d2l_check.d2l_problem(lm):
            st.caption(md(problem))
        else:
            d2l_section(lm, entry, settings)
        link_note(state, TRANSLATE_KEYS)
        write_url(state, TRANSLATE_KEYS)
        model_footer(lm)


main()
