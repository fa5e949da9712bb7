"""Widgets shared by the Translate and Attention pages, and the view state they keep."""

from __future__ import annotations

from dataclasses import fields

import streamlit as st

from core.attribution.methods import METHODS
from core.model.checked_translation import DEFAULT_SENTENCE, EXAMPLES, MAX_SENTENCE_TOKENS
from core.model.parts import DEFAULT_TEMPLATE, MAX_TEMPLATE_CHARS
from pages.ui.text import code, md
from pages.ui.view_state import MAX_TEXT_CHARS, ViewState

TRANSLATE_KEYS = (  # the Translate page's URL keys
    *("model", "sentence", "reference", "target", "beam", "alpha", "max_len", "target_lang"),
    "prompt",
)
ATTENTION_KEYS = tuple(f.name for f in fields(ViewState))  # the Attention page's: the whole view


def view_state() -> ViewState:
    """The shared view state: from the URL on the session's first run, then the session's.

    Room above the page for the one note that names the values a link asked for and did
    not get (``link_note``, at the end of the run)."""
    if "view_state" not in st.session_state:
        state = ViewState.from_query(st.query_params.to_dict())
        if state.method not in METHODS:  # checked here: core.attention sits below attribution
            state.drop("method", f"not one of {', '.join(METHODS)}")
        named = {"kind", "layer", "head"} & set(st.query_params)
        if state.section == "alignment" and not named:  # a URL that names no reader
            st.session_state["al_open_best"] = True  # alignment_gold_view.OPEN_BEST
        st.session_state["view_state"] = state
    state = st.session_state["view_state"]
    state.note_slot = st.empty()  # on every run: the elements below keep their places
    return state


def link_note(state: ViewState, keys: tuple[str, ...]) -> None:
    """One warning, above the page, naming each of ``keys`` the link asked for and this run
    shows otherwise, and why (said once: those keys are then checked)."""
    refused = state.refused(keys)
    slot = getattr(state, "note_slot", None)
    if refused and slot is not None:
        slot.warning(refused_words(refused))


def refused_words(refused: list[tuple[str, str, str, str]]) -> str:
    """The link's note: what it asked for, then each value's reason and what is shown."""
    asked = [code(f"{name}={_short(raw)}") for name, raw, _, _ in refused]
    listed = ", ".join(asked[:-1]) + " and " + asked[-1] if len(asked) > 1 else asked[0]
    reasons = [
        f"{code(name)}: {md((why or 'not available for this model or section').rstrip('.'))}; "
        + (f"showing {code(f'{name}={_short(shown)}')}." if shown else "left at its default.")
        for name, _, shown, why in refused
    ]
    return f"The link asked for {listed}, which this page cannot show. " + " ".join(reasons)


def _short(text: str, most: int = 40) -> str:
    """``text`` cut to ``most`` characters (an ellipsis says so)."""
    return text if len(text) <= most else text[: most - 1] + "…"


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


def seed_choice(state: ViewState, name: str, key: str, options: list[str]) -> None:
    """Seed selectbox ``key`` with the state's field ``name`` ("" = the first of ``options``;
    one not among them: the first, said in the link's note)."""
    if getattr(state, name) and getattr(state, name) not in options:
        state.drop(name, "not among those offered here")
    widget_default(key, getattr(state, name) or options[0], options)


def keep_choice(state: ViewState, name: str, choice: str, options: list[str]) -> str:
    """Keep a ``seed_choice`` selectbox's ``choice`` in field ``name`` ("" for the first)."""
    if choice == state.asked.get(name):
        state.granted(name)  # the first option, asked by name
    setattr(state, name, "" if choice == options[0] else choice)
    return choice


def clamp_widget(key: str, value, options) -> None:
    """Reset a widget's value to ``value`` when it is not among ``options``."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = value if value in options else options[-1]


def target_language(lm, state: ViewState, prefix: str) -> None:
    """A multilingual model's target language (widget ``<prefix>_target``); nothing for a
    model that translates into one language."""
    codes = lm.language_codes()
    if not codes:
        state.target_lang, state.why["target_lang"] = "", "this model writes one language"
        return
    french = lm.language_code("fr")  # French first, when the model has it
    default = state.target_lang if state.target_lang in codes else (french or codes[0])
    state.why["target_lang"] = "not one of this model's language codes"
    widget_default(f"{prefix}_target", default, codes)
    state.target_lang = st.selectbox(
        "Target language",
        codes,
        key=f"{prefix}_target",
        help="Forced as the first output token (forced_bos_token_id), as the model expects.",
    )


def prompt_template(lm, state: ViewState, prefix: str) -> None:
    """A prompted language model's template (widget ``<prefix>_prompt``); nothing for a model
    that takes none (its capability row ``template``: a decoder trained here reads its own
    layout). A template that cannot make a prompt is kept in the box and named by the
    translation's error."""
    if lm.supports("template"):
        state.prompt, state.why["prompt"] = "", "this model reads no prompt"
        return
    if len(state.prompt) > MAX_TEMPLATE_CHARS:  # from a link: the box could not hold it
        chars = f"{len(state.prompt):,} characters"
        state.drop("prompt", f"{chars}; a template holds at most {MAX_TEMPLATE_CHARS}")
    widget_default(f"{prefix}_prompt", state.prompt or DEFAULT_TEMPLATE)
    typed = st.text_area(
        "Prompt template",
        key=f"{prefix}_prompt",
        height=80,  # no max_chars: the browser would drop a longer paste without a word
        help="The model reads this text with your sentence in place of {src} and continues it; "
        "its continuation, up to the end of the line, is the translation.",
    )
    if typed == state.asked.get("prompt"):
        state.granted("prompt")  # the default template, asked in full
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


FILLED = "filled_sentence"  # session key: the default a token sequence box last filled in


def untouched(state: ViewState, key: str) -> bool:
    """Whether sentence box ``key`` shows what a page put there, not what was typed: an example
    sentence (``EXAMPLES``) or the default a token sequence box filled in (``FILLED``)."""
    shown = st.session_state.get(key, state.sentence)
    filled = shown == st.session_state.get(FILLED)
    return shown == state.sentence and (shown in EXAMPLES or filled)


def sentence_input(
    state: ViewState, prefix: str, label: str = "English sentence", example: str = DEFAULT_SENTENCE
) -> str | None:
    """The sentence box (widget key ``<prefix>_sentence``), kept in the view state; the
    model's own ``example`` where the box still holds what a page put there (``untouched``:
    another model's example or a token sequence model's default sequence). None, after one
    error, for a box past MAX_TEXT_CHARS (the state keeps the last sentence: nothing is
    translated).

    No character limit on the box: one drops a longer paste whole, so the length is checked
    (and named) by core.model.checked_translation instead, past MAX_TEXT_CHARS here.
    """
    key = f"{prefix}_sentence"
    if untouched(state, key) and state.sentence != example:  # another model's: this one's
        state.set_sentence(example)
        st.session_state[key] = example
    widget_default(key, state.sentence)
    sentence = st.text_input(
        label,
        key=f"{prefix}_sentence",
        help=f"At most {MAX_SENTENCE_TOKENS} words and punctuation marks (tokens).",
    )
    if len(sentence) > MAX_TEXT_CHARS:
        bounded(sentence, "sentence")  # its one line; the page stops there
        return None
    state.set_sentence(sentence)
    return state.sentence
