"""The Attention page's input for a model that reads no sentence (``supports("sentence")``: one
trained here on the induction task): a token sequence box, read in one teacher-forced pass, and
the line that says what the model read and how well it predicted it."""

from __future__ import annotations

import streamlit as st

from core.attention.task_sequence import sequence_score, task_sequence, tokens_words
from core.model.interface import TranslationModel
from core.model.parts import Translation
from pages.ui.text import md
from pages.ui.view_state import MAX_TEXT_CHARS, ViewState
from pages.ui.view_widgets import FILLED, bounded, untouched, widget_default


def sequence_input(lm: TranslationModel, state: ViewState, prefix: str, why: str) -> str | None:
    """The token sequence box (widget ``<prefix>_sentence``), kept as the view's sentence: the
    model's task sequence (``core.attention.task_sequence``, recorded as ``FILLED``) where the
    box holds what a page put there (``untouched``); None, after one error, for an empty box
    or one past MAX_TEXT_CHARS. No prompt, target language or typed translation: ``why``
    says so in the link's note."""
    key, default = f"{prefix}_sentence", task_sequence(lm)
    if default and untouched(state, key):
        state.set_sentence(default)
        st.session_state[key] = st.session_state[FILLED] = default
    widget_default(key, state.sentence)
    typed = st.text_input(
        "Token sequence",
        key=key,
        help="The tokens the model reads after its start token, in one pass: each is predicted "
        "from the ones before it (teacher forcing). Every map and section below reads it.",
    )
    st.caption(md(why))
    for name in ("prompt", "target", "target_lang"):
        setattr(state, name, "")
        state.why[name] = why
    if len(typed) > MAX_TEXT_CHARS:
        bounded(typed, "sequence")  # its one line; the page stops there
        return None
    state.set_sentence(typed)
    if not typed.strip():  # as a translator's empty sentence box says
        st.error(md(f"The token sequence is empty: type a few of its tokens ({tokens_words(lm)})."))
        return None
    return state.sentence


def sequence_line(lm: TranslationModel, t: Translation, maps: bool = True) -> None:
    """The sequence read (its start token first) and how many of its tokens the model
    predicted as its first choice; for a sequence read twice, how many of the repeat
    (``maps``: the page's maps below read this pass, and the line says so)."""
    score = sequence_score(t)
    st.markdown(f"**Sequence read:** {md(' '.join(t.decoder_inputs))}")
    firsts = sum(r == 1 for r in t.ranks[: score.tokens])
    words = (
        f"One pass over the sequence, each token predicted from the ones before it: {firsts} "
        f"of its {score.tokens} tokens are the model's first choice"
    )
    if score.repeat:  # read twice: only the repeat can be predicted
        words += (
            f", {score.firsts} of the {score.scored} of its repeat (what followed each token the "
            "first time)"
        )
    st.caption(words + (". Every map below reads this pass." if maps else "."))
    unknown = sum(i == lm.unk_id for i in t.out_ids)
    if unknown:
        are = "is" if unknown == 1 else "are"
        st.warning(
            md(
                f"{unknown} of the tokens typed {are} not in this model's vocabulary: "
                f"each is read as <unk>. Its tokens are {tokens_words(lm)}."
            )
        )
