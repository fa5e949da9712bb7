"""Attention page, "Patching" section: activation patching between the sentence and a
corrupted copy of it, every head of the three kinds and every position of the residual
stream (``core.attention.patching``; ``python -m core.patch`` prints the same figures)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.attention.maps import export_name
from core.attention.patching import DIRECTION_NAMES, DIRECTIONS, INDIRECT_OBJECT
from core.figures import patching as figs
from core.model.parts import TranslationError
from pages.ui.attention import cached_ablation as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.heavy_work import SlotTaken, TimeLimit
from pages.ui.text import code, md
from pages.ui.view_widgets import bounded, widget_default

EXAMPLE = ("the boy is tall .", "the girl is tall .")


def corrupt_input(page: SectionInputs) -> str:
    """The corrupted sentence box (widget ``at_corrupt``), kept in the view state."""
    state = page.state
    widget_default("at_corrupt", state.corrupt)
    typed = st.text_input(
        "Corrupted sentence: the sentence above with a word changed, as many tokens",
        key="at_corrupt",
        placeholder=f"e.g. {EXAMPLE[1]} against {EXAMPLE[0]}",
    )
    state.corrupt = bounded(typed, "corrupted sentence").strip()
    return state.corrupt


def question_inputs(page: SectionInputs) -> tuple[str, str | None, tuple[str, str] | None]:
    """The direction radio and, when the user chooses the step, the prefix and the answers:
    (direction, prefix or None, answers or None), kept in the view state."""
    state = page.state
    widget_default("at_patch_dir", state.patch_dir, DIRECTIONS)
    state.patch_dir = st.radio(
        "Direction",
        DIRECTIONS,
        key="at_patch_dir",
        horizontal=True,
        format_func=DIRECTION_NAMES.get,
    )
    widget_default("at_patch_ask", state.patch_ask)
    state.patch_ask = st.checkbox(
        "Choose the step and the two answer words myself (where the translations agree, or "
        "to ask about another word)",
        key="at_patch_ask",
    )
    if not state.patch_ask:
        return state.patch_dir, None, None
    left, mid, right = st.columns([2, 1, 1])
    for key, where, label in (
        ("patch_prefix", left, "Target words before the step (empty: the first word)"),
        ("patch_answer", mid, "Clean run's answer (empty: its likeliest)"),
        ("patch_wrong", right, "Corrupted run's answer (empty: its likeliest)"),
    ):
        widget_default(f"at_{key}", getattr(state, key))
        setattr(state, key, bounded(where.text_input(label, key=f"at_{key}"), "box").strip())
    given = (state.patch_answer, state.patch_wrong)
    if any(given) and not all(given):
        st.info("Give both answer words, or neither (then each run's likeliest word is used).")
    return state.patch_dir, state.patch_prefix, given if all(given) else None


def use_indirect_object() -> None:
    """Button callback: the template, the two sentences and the two answers of the
    indirect-object task (``INDIRECT_OBJECT``) into their boxes."""
    pair = INDIRECT_OBJECT
    boxes = {
        "at_prompt": pair["prompt"],
        "at_sentence": pair["clean"],
        "at_corrupt": pair["corrupt"],
        "at_patch_ask": True,
        "at_patch_prefix": "",
        "at_patch_answer": pair["answer"],
        "at_patch_wrong": pair["wrong"],
    }
    for key, value in boxes.items():
        st.session_state[key] = value


def patching_section(page: SectionInputs) -> None:
    """The metric, the head grids, the residual-stream grids and the table as CSV."""
    st.caption(
        "Which parts of the model carry the difference between two sentences? Both are "
        "translated; at the first step where the translations differ, the measure is the "
        "logit difference between the two runs' words there. Each head's output, and each "
        "layer's output at each position, is taken from the sentence above (the clean run) "
        "and written into the corrupted run, one at a time: 1 means that part alone brings "
        "the clean run's word back, 0 that it changes nothing (Meng et al. 2022; Wang et al. "
        "2023)."
    )
    if page.lm.reads_prompt:
        st.button(
            "Use the indirect-object example (Wang et al. 2023)",
            key="at_patch_ioi",
            on_click=use_indirect_object,
            help="Template: “When John and Mary went to the shops, {src} gave the bag to”; "
            "clean “John”, corrupted “Mary”; answers “Mary” and “John”.",
        )
    corrupt = corrupt_input(page)
    if not corrupt:
        st.info(md(f"Type the corrupted sentence, e.g. {code(EXAMPLE[1])} for {code(EXAMPLE[0])}."))
        return
    direction, prefix, answers = question_inputs(page)
    entry, state = page.entry, page.state
    try:
        result = cached.patched(
            page.lm,
            entry.path,
            entry.mtime,
            state.sentence,
            corrupt,
            direction,
            prefix,
            answers,
            state.target_lang,
            page.lm.view_key,
        )
    except TranslationError as e:
        st.error(md(e))
        return
    except SlotTaken as e:
        st.warning(md(e))
        return
    except TimeLimit as e:
        st.error(md(f"The patching run was stopped: {e}"))
        return
    step = len(result.prefix) - 1
    words = "the answers you gave are" if result.chosen and answers else "the runs' answers are"
    found = (
        f"the clean run writes “{result.answer}” and the corrupted run “{result.wrong}”"
        if not result.chosen
        else f"{words} “{result.answer}” (clean) and “{result.wrong}” (corrupted)"
    )
    reading = (
        "1 = that part alone brings the clean word back, 0 = it changes nothing"
        if direction == "denoise"
        else "1 = that part alone, taken from the corrupted run, gives its word, "
        "0 = the clean run is unchanged"
    )
    st.markdown(
        md(
            f"At step {step}, after “{' '.join(result.prefix)}”, {found}. Logit difference "
            f"(clean word − corrupted word): {result.clean_metric:+.2f} clean, "
            f"{result.corrupt_metric:+.2f} corrupted. {DIRECTION_NAMES[direction].capitalize()}: "
            f"{reading}."
        )
    )
    if result.caveat:  # a gap too small to divide by: the effects scale noise
        st.warning(md(result.caveat))
    pair = (state.sentence, corrupt) if direction == "denoise" else (corrupt, state.sentence)
    about = f"“{pair[0]}” into “{pair[1]}”"
    name = export_name(state.model, state.sentence, None, None, None, "patching")
    chart(figs.heads_figure(result.rows, about, direction), "patch_heads", name=f"{name}_heads")
    chart(
        figs.stream_figure(result.rows, result.clean, result.prefix, about, direction),
        "patch_stream",
        name=f"{name}_stream",
    )
    table = pd.DataFrame(result.rows)
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button("Patching table as CSV", csv, f"{name}.csv", "text/csv")
