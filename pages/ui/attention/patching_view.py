"""Attention page, "Patching" section: activation patching between the sentence and a
corrupted copy of it, every head of the three kinds and every position of the residual
stream, or what the picker chooses (a head's output, q, k, v or pattern, an MLP, per
position) (``core.attention.patching``; ``python -m core.patch`` prints the same figures), or
attribution patching's estimate beside it, or each head's path through chosen receivers. A
masked language model is asked at its sentences' first mask (``patching_question.at_mask``)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from core.attention.maps import export_name
from core.attention.patch_methods import METHOD_NAMES, METHODS
from core.attention.patching import (
    DIRECTION_NAMES,
    DIRECTIONS,
    INDIRECT_OBJECT,
    KINDS,
    MLPS,
    PICKS,
    STREAMS,
)
from core.attention.patching_question import at_mask, example_pair
from core.attention.path_patching import HEAD_FORMAT
from core.figures import patching as figs
from core.model.parts import TranslationError
from pages.ui.attention import cached_ablation as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.heavy_work import SlotTaken, TimeLimit
from pages.ui.text import code, md
from pages.ui.view_widgets import bounded, widget_default


def corrupt_input(page: SectionInputs) -> str:
    """The corrupted sentence box (widget ``at_corrupt``), kept in the view state."""
    state = page.state
    widget_default("at_corrupt", state.corrupt)
    clean, corrupt = example_pair(page.lm)
    typed = st.text_input(
        "Corrupted sentence: the sentence above with a word changed, as many tokens",
        key="at_corrupt",
        placeholder=f"e.g. {corrupt} against {clean}",
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
    boxes = (
        ("patch_prefix", left, "Target words before the step (empty: the first word)"),
        ("patch_answer", mid, "Clean run's answer (empty: its likeliest)"),
        ("patch_wrong", right, "Corrupted run's answer (empty: its likeliest)"),
    )
    masked = at_mask(page.lm)  # read at the first mask: no step to choose, no prefix
    for key, where, label in boxes[1:] if masked else boxes:
        widget_default(f"at_{key}", getattr(state, key))
        setattr(state, key, bounded(where.text_input(label, key=f"at_{key}"), "box").strip())
    given = (state.patch_answer, state.patch_wrong)
    if any(given) and not all(given):
        st.info("Give both answer words, or neither (then each run's likeliest word is used).")
    prefix = None if masked else state.patch_prefix
    return state.patch_dir, prefix, given if all(given) else None


def method_input(page: SectionInputs) -> tuple[str, str]:
    """The method radio and, for path patching, the receivers box and whether the MLPs are
    frozen: (method, receivers as typed), kept in the view state."""
    state = page.state
    widget_default("at_patch_method", state.patch_method, METHODS)
    state.patch_method = st.radio(
        "Method", METHODS, key="at_patch_method", horizontal=True, format_func=METHOD_NAMES.get
    )
    if state.patch_method != "path":
        return state.patch_method, ""
    widget_default("at_patch_receivers", state.patch_receivers)
    typed = st.text_input(
        f"Receivers: logits, or heads written {HEAD_FORMAT}, separated by commas",
        key="at_patch_receivers",
    )
    state.patch_receivers = bounded(typed, "receivers box").strip()
    widget_default("at_patch_freeze_mlps", state.patch_freeze_mlps)
    state.patch_freeze_mlps = st.checkbox(
        "Freeze the MLPs too (a path to the logits is then the sender's direct effect only)",
        key="at_patch_freeze_mlps",
        help="Wang et al. freeze the other heads only: the MLPs are recomputed, so a path "
        "also runs through them. Frozen at the corrupted run's, they carry nothing on.",
    )
    return state.patch_method, state.patch_receivers


def sites_input(page: SectionInputs) -> tuple[str, ...]:
    """The "what to patch" radio (activation patching): the selections it patches
    (``patching.PICKS``), kept in the view state."""
    state = page.state
    widget_default("at_patch_sites", state.patch_sites, tuple(PICKS))
    state.patch_sites = st.radio(
        "What to patch",
        tuple(PICKS),
        key="at_patch_sites",
        horizontal=True,
        format_func=lambda pick: PICKS[pick][1],
        help="Each head's output (z) at every position; at one position; its q, k, v or "
        "pattern (a grouped-query model's k and v belong to a key/value head its group "
        "shares); each MLP's output or each layer's output (the stream) at one position.",
    )
    return PICKS[state.patch_sites][0]


def _activation_charts(result, about: str, direction: str, name: str, key="patch") -> None:
    """The figures of what activation patching patched: heads, their parts, positions, the
    stream (``key``: their widgets' keys' start)."""
    rows = result.rows
    whole = [r for r in rows if r["kind"] in KINDS and "position" not in r]
    if any("activation" not in r for r in whole):
        chart(figs.heads_figure(rows, about, direction), f"{key}_heads", name=f"{name}_heads")
    if any("activation" in r for r in whole):
        chart(figs.parts_figure(rows, about, direction), f"{key}_parts", name=f"{name}_parts")
    if any(r["kind"] in (*KINDS, *MLPS) and "position" in r for r in rows):
        figure = figs.positions_figure(rows, result.axes(), about, direction)
        chart(figure, f"{key}_positions", name=f"{name}_positions")
    if any(r["kind"] in STREAMS for r in rows):
        chart(
            figs.stream_figure(rows, result.clean, result.prefix, about, direction),
            f"{key}_stream",
            name=f"{name}_stream",
        )


def _computed(page: SectionInputs, corrupt: str, asked: tuple, method: str, receivers: str):
    """The cached result of ``method`` (``Patching``, ``Estimated`` or ``PathPatching``)."""
    entry, state, lm = page.entry, page.state, page.lm
    where = (lm, entry.path, entry.mtime, state.sentence, corrupt)
    if method == "path":
        frozen = state.patch_freeze_mlps
        return cached.path_patched(
            *where, receivers, *asked, state.target_lang, lm.view_key, frozen
        )
    selection = PICKS[state.patch_sites][0]
    if method == "attribution":
        return cached.attribution_patched(*where, *asked, state.target_lang, lm.view_key, selection)
    return cached.patched(*where, *asked, state.target_lang, lm.view_key, selection)


def _estimate_charts(done, about: str, direction: str, name: str) -> None:
    """Attribution patching's estimate beside real patching: how close, and its grids."""
    result = done.patching
    rho = "—" if done.spearman is None else f"{done.spearman:.3f}"
    st.markdown(
        f"Attribution patching's estimate (one gradient) against real patching: Spearman "
        f"{rho}, largest absolute error {done.largest_error:.3f}."
    )
    guess = dataclasses.replace(result, rows=done.estimate_rows())
    estimate = f"{about}: attribution patching's estimate"
    _activation_charts(guess, estimate, direction, f"{name}_estimate", "patch_estimate")
    _activation_charts(result, about, direction, name)


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


def use_example(pair: tuple[str, str]) -> None:
    """Button callback: the example's two sentences into their boxes, each run's likeliest
    word its answer."""
    boxes = {"at_sentence": pair[0], "at_corrupt": pair[1], "at_patch_ask": False}
    for key, value in boxes.items():
        st.session_state[key] = value


HOW = {  # where the measure is read: at a translation's first difference, or at the mask
    False: "Both are translated; at the first step where the translations differ, the "
    "measure is the logit difference between the two runs' words there.",
    True: "Both sentences' first mask is filled; the measure is the logit difference there "
    "between the clean run's likeliest fill and the corrupted run's.",
}


def patching_section(page: SectionInputs) -> None:
    """The metric, the head grids, the residual-stream grids and the table as CSV."""
    masked = at_mask(page.lm)
    st.caption(
        f"Which parts of the model carry the difference between two sentences? {HOW[masked]} "
        "Each head's output, and each layer's output at each position, is taken from the "
        "sentence above (the clean run) and written into the corrupted run, one at a time: 1 "
        "means that part alone brings the clean run's word back, 0 that it changes nothing "
        "(Meng et al. 2022; Wang et al. 2023)."
    )
    example = example_pair(page.lm)
    if masked:  # two sentences holding the model's own mask token
        st.button(
            "Use the example pair",
            key="at_patch_example",
            on_click=use_example,
            args=(example,),
            help=f"Clean “{example[0]}”, corrupted “{example[1]}”.",
        )
    if not page.lm.supports("template"):  # the example is a prompt template
        st.button(
            "Use the indirect-object example (Wang et al. 2023)",
            key="at_patch_ioi",
            on_click=use_indirect_object,
            help="Template: “When John and Mary went to the shops, {src} gave the bag to”; "
            "clean “John”, corrupted “Mary”; answers “Mary” and “John”.",
        )
    corrupt = corrupt_input(page)
    if not corrupt:  # an over-long paste is named by bounded: not told it is empty too
        if not str(st.session_state.get("at_corrupt") or "").strip():
            st.info(f"Type the corrupted sentence, e.g. {code(example[1])} for {code(example[0])}.")
        return
    direction, prefix, answers = question_inputs(page)
    method, receivers = method_input(page)
    if method != "path":  # path patching's senders and receivers are heads
        sites_input(page)
    state = page.state
    try:
        done = _computed(page, corrupt, (direction, prefix, answers), method, receivers)
    except TranslationError as e:
        st.error(md(e))
        return
    except SlotTaken as e:
        st.warning(md(e))
        return
    except TimeLimit as e:
        st.error(md(f"The patching run was stopped: {e}"))
        return
    result = getattr(done, "patching", done)  # the question and rows every method shares
    step = len(result.prefix) - 1
    words = "the answers you gave are" if result.chosen and answers else "the runs' answers are"
    writes = "fills" if masked else "writes"
    found = (
        f"the clean run {writes} “{result.answer}” and the corrupted run “{result.wrong}”"
        if not result.chosen
        else f"{words} “{result.answer}” (clean) and “{result.wrong}” (corrupted)"
    )
    where = (
        f"At the first {result.prefix[0]} (position {result.clean.index(result.prefix[0])})"
        if masked
        else f"At step {step}, after “{' '.join(result.prefix)}”"
    )
    reading = (
        "1 = that part alone brings the clean word back, 0 = it changes nothing"
        if direction == "denoise"
        else "1 = that part alone, taken from the corrupted run, gives its word, "
        "0 = the clean run is unchanged"
    )
    st.markdown(
        md(
            f"{where}, {found}. Logit difference "
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
    if method == "path":
        through = ", ".join(done.receivers)
        mlps = "frozen too" if done.freeze_mlps else "recomputed"
        st.markdown(
            md(f"Each head's effect through {through} only (Wang et al. 2023); MLPs {mlps}.")
        )
        about = f"{about}, each head through {through} only (MLPs {mlps})"
        chart(figs.heads_figure(result.rows, about, direction), "patch_paths", name=f"{name}_paths")
    elif method == "attribution":
        _estimate_charts(done, about, direction, name)
    else:
        _activation_charts(result, about, direction, name)
    table = pd.DataFrame(result.rows)
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button("Patching table as CSV", csv, f"{name}.csv", "text/csv")
