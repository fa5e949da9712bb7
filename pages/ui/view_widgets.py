"""Widgets shared by the Translate and Attention pages, and the view state they keep."""

from __future__ import annotations

from dataclasses import fields

import streamlit as st

from core.attribution.methods import METHODS
from core.model.checked_translation import DEFAULT_SENTENCE, EXAMPLES, MAX_SENTENCE_TOKENS
from core.model.parts import DEFAULT_TEMPLATE, MAX_TEMPLATE_CHARS
from pages.ui.view_state import MAX_REFERENCE_CHARS, MAX_TEXT_CHARS, ViewState

TRANSLATE_KEYS = (  # the Translate page's URL keys
    *("model", "sentence", "reference", "target", "beam", "alpha", "max_len", "target_lang"),
    "prompt",
)
ATTENTION_KEYS = tuple(f.name for f in fields(ViewState))  # the Attention page's: the whole view


def view_state() -> ViewState:
    """The shared view state: from the URL on the session's first run, then the session's."""
    if "view_state" not in st.session_state:
        state = ViewState.from_query(st.query_params.to_dict())
        if state.method not in METHODS:  # checked here: core.attention sits below attribution
            state.method = ViewState.method
        if state.too_long:  # said once, on the run that read the link
            names = ", ".join(n.replace("_", " ") for n in state.too_long)
            st.warning(
                f"The link's {names} was too long for a link (more than {MAX_TEXT_CHARS:,} "
                f"characters; a reference {MAX_REFERENCE_CHARS:,}) and was left out: type it "
                "in the box instead."
            )
        named = {"kind", "layer", "head"} & set(st.query_params)
        if state.section == "alignment" and not named:  # a URL that names no reader
            st.session_state["al_open_best"] = True  # alignment_gold_view.OPEN_BEST
        st.session_state["view_state"] = state
    return st.session_state["view_state"]


def write_url(state: ViewState, keys: tuple[str, ...], owned=None) -> None:
    """Put this page's part of the state into the URL, dropping keys at their defaults (and
    a section's own fields while another is shown: ``owned``, {field: section})."""
    wanted = state.to_query(keys, owned)
    for key in keys:
        if key in wanted:
            if st.query_params.get(key) != wanted[key]:
                st.query_params[key] = wanted[key]
        elif key in st.query_params:
            del st.query_params[key]


def widget_default(key: str, value, options=None) -> None:
    """Seed a widget's session value unless it already holds one (that is among ``options``)."""
    if key not in st.session_state or (
        options is not None and st.session_state[key] not in options
    ):
        st.session_state[key] = value


def clamp_widget(key: str, value, options) -> None:
    """Reset a widget's value to ``value`` when it is not among ``options``."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = value if value in options else options[-1]


def target_language(lm, state: ViewState, prefix: str) -> None:
    """A multilingual model's target language (widget ``<prefix>_target``); nothing for a
    model that translates into one language."""
    codes = lm.language_codes()
    if not codes:
        state.target_lang = ""
        return
    french = lm.language_code("fr")  # French first, when the model has it
    default = state.target_lang if state.target_lang in codes else (french or codes[0])
    widget_default(f"{prefix}_target", default, codes)
    state.target_lang = st.selectbox(
        "Target language",
        codes,
        key=f"{prefix}_target",
        help="Forced as the first output token (forced_bos_token_id), as the model expects.",
    )


def prompt_template(lm, state: ViewState, prefix: str) -> None:
    """A prompted language model's template (widget ``<prefix>_prompt``); nothing for a model
    that reads no prompt. A template that cannot make a prompt is kept in the box and named by
    the translation's error."""
    if not lm.reads_prompt:
        state.prompt = ""
        return
    if len(state.prompt) > MAX_TEMPLATE_CHARS:  # from a link: the box could not hold it
        st.error(
            f"The link's prompt template has {len(state.prompt):,} characters; a template holds "
            f"at most {MAX_TEMPLATE_CHARS}: the default is used instead."
        )
        state.prompt = ""
    widget_default(f"{prefix}_prompt", state.prompt or DEFAULT_TEMPLATE)
    typed = st.text_area(
        "Prompt template",
        key=f"{prefix}_prompt",
        height=80,
        max_chars=MAX_TEMPLATE_CHARS,
        help="The model reads this text with your sentence in place of {src} and continues it; "
        "its continuation, up to the end of the line, is the translation.",
    )
    state.prompt = "" if typed == DEFAULT_TEMPLATE else typed


def bounded(text: str, what: str) -> str:
    """``text`` as typed, or "" with one line when it passes MAX_TEXT_CHARS: a longer paste is
    named, never tokenised at every rerun (a box with a limit would drop it whole)."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    st.error(
        f"The {what} has {len(text):,} characters; this page reads at most "
        f"{MAX_TEXT_CHARS:,}: type a shorter one."
    )
    return ""


def target_input(state: ViewState, prefix: str, label: str = "French") -> str:
    """The box of a translation to explain instead of the model's own (widget key
    ``<prefix>_target_text``), kept in the view state; "" when empty."""
    key, owner = f"{prefix}_target_text", f"{prefix}_target_sentence"
    if st.session_state.get(owner) != state.sentence:  # a new sentence: its own target
        st.session_state[key] = state.target
        st.session_state[owner] = state.sentence
    typed = st.text_input(
        f"Your translation ({label}, optional)",
        key=key,
        placeholder="Type a translation to see how the model rates and explains it",
        help="The model is fed this translation (teacher forcing) instead of decoding its own: "
        "every map and attribution then explains it, and each token shows its probability "
        "and its rank among the model's choices at that step.",
    )
    state.target = bounded(typed, "translation").strip()
    return state.target


def sentence_input(
    state: ViewState, prefix: str, label: str = "English sentence", example: str = DEFAULT_SENTENCE
) -> str:
    """The sentence box (widget key ``<prefix>_sentence``), kept in the view state; a model
    that reads another language than English shows its own ``example`` where the box still
    holds the default sentence.

    No character limit on the box: one drops a longer paste whole, so the length is checked
    (and named) by core.model.checked_translation instead, past MAX_TEXT_CHARS here.
    """
    key = f"{prefix}_sentence"
    shown = st.session_state.get(key, state.sentence)
    untouched = shown == state.sentence and state.sentence in EXAMPLES
    if untouched and state.sentence != example:  # another model's example: this one's
        state.set_sentence(example)
        st.session_state[key] = example
    widget_default(key, state.sentence)
    sentence = st.text_input(
        label,
        key=f"{prefix}_sentence",
        help=f"At most {MAX_SENTENCE_TOKENS} words and punctuation marks (tokens).",
    )
    state.set_sentence(bounded(sentence, "sentence"))
    return state.sentence
