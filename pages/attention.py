"""Attention page: encoder, decoder and cross attention of one sentence, head by head."""

from __future__ import annotations

import streamlit as st

from core.attention.kinds import reading_hint
from core.model.parts import TranslationError
from pages.ui.attention.alignment_gold_view import open_on_best_reader
from pages.ui.attention.controls import view_controls
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.sections import SECTION_FIELDS, coming_section, pick_section
from pages.ui.attention.sequence_read import sequence_input, sequence_line
from pages.ui.cached import sentence_maps, translate
from pages.ui.frame import ensure_app_navigation, link, model_footer
from pages.ui.model_picker import pick_model
from pages.ui.text import md
from pages.ui.view_state import clamp_view
from pages.ui.view_widgets import (
    ATTENTION_KEYS,
    TRANSLATE_KEYS,
    link_note,
    prompt_template,
    sentence_input,
    target_input,
    target_language,
    view_state,
    write_url,
)


def sentence_boxes(lm, state) -> str | None:
    """The inputs of a model that reads a sentence: target language, prompt template, the
    sentence, and a translation to explain instead of its own (where it translates)."""
    target_language(lm, state, "at")
    prompt_template(lm, state, "at")
    typed = sentence_input(state, "at", lm.source_label, lm.example_sentence)
    if problem := lm.supports("force"):  # a model that does not translate has nothing to rate
        state.target, state.why["target"] = "", problem
    else:
        target_input(state, "at", lm.target_name)
    return typed


def output_line(lm, t, settings) -> None:
    """The translation the maps explain: the model's own, or the one the user typed."""
    mode = "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}"
    if lm.supports("decoding"):  # filled in one pass: no decoding mode to name
        st.markdown(f"**{lm.output_label}:** {md(t.text) or '(empty)'}")
    elif t.forced:
        st.markdown(f"**Your translation (fed to the decoder):** {md(t.text) or '(empty)'}")
        firsts = sum(r == 1 for r in t.ranks)
        st.caption(
            f"Every map and attribution below explains this translation. log-probability "
            f"{t.log_prob:.2f}; {firsts} of {len(t.ranks)} tokens are the model's first choice "
            "(each token's probability and rank: Translate page)."
        )
    else:
        st.markdown(f"**{lm.output_label} ({mode}):** {md(t.text) or '(empty)'}")


def main() -> None:
    """Build the page."""
    ensure_app_navigation()
    st.title("Attention")
    state = view_state()
    picked = pick_model(state, "at")
    if picked is None:
        link_note(state, ("model",))
        write_url(state, ("sentence",))
        return
    entry, lm = picked
    no_sentence = lm.supports("sentence")  # it reads a token sequence, in one forced pass
    typed = (
        sequence_input(lm, state, "at", no_sentence) if no_sentence else sentence_boxes(lm, state)
    )
    settings, t = state.settings(), None
    read = ("", state.sentence) if no_sentence else (state.sentence, state.target)
    try:  # nothing translated for a paste past the box's limit (said once, above)
        lm = lm.with_prompt(settings.prompt)
        if typed is not None:
            t = translate(lm, entry.path, entry.mtime, read[0], settings, read[1])
    except TranslationError as e:
        st.error(md(e))
    if t is None:
        link_note(state, TRANSLATE_KEYS)  # the view's values wait for a translation
        write_url(state, ATTENTION_KEYS, SECTION_FIELDS)
        model_footer(lm)
        return
    key = (entry.path, entry.mtime, state.sentence, settings, state.target)  # SectionInputs.key
    pieces = sentence_maps(t, key)
    if no_sentence:
        sequence_line(lm, t)
    else:
        output_line(lm, t, settings)
    for w in t.warnings:
        st.warning(md(w))
    if not no_sentence:  # the three kinds in a translator's words; a decoding setting
        if lm.kinds_words:
            st.caption(lm.kinds_words)
        if lm.supports("decoding") is None:  # a model filling its output at once has none
            link(
                "translate.py",
                "Change decoding on the Translate page",
                state.to_query(TRANSLATE_KEYS),
            )
    clamp_view(state, pieces)
    open_on_best_reader(entry, lm, state)
    reads_view = coming_section(state, lm).reads_view  # the logit lens reads no kind or head
    stretch = view_controls(pieces, state, lm.subword, lm.pieces_name) if reads_view else False
    maps = sentence_maps(t, key, state.words)
    section = pick_section(state, lm)  # only the sections the model's capabilities allow
    if reads_view:
        st.caption(reading_hint(state.kind))
    section.draw(SectionInputs(entry, lm, t, pieces, maps, state, stretch))
    link_note(state, ATTENTION_KEYS)
    write_url(state, ATTENTION_KEYS, SECTION_FIELDS)
    model_footer(lm)


main()
