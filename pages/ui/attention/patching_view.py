"""Attention page, "Patching" section: activation patching between the sentence and a
corrupted copy of it, every head of the three kinds and every position of the residual
stream (``core.attention.patching``; ``python -m core.patch`` prints the same figures)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.attention.maps import export_name
from core.figures import patching as figs
from core.model.decode import TranslationError
from pages.ui.attention import cached_ablation as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.text import code, md
from pages.ui.view_widgets import widget_default

EXAMPLE = ("the boy is tall .", "the girl is tall .")


def corrupt_input(page: SectionInputs) -> str:
    """The corrupted sentence box (widget ``at_corrupt``), kept in the view state."""
    state = page.state
    widget_default("at_corrupt", state.corrupt)
    state.corrupt = st.text_input(
        "Corrupted sentence: the sentence above with a word changed, as many tokens",
        key="at_corrupt",
        placeholder=f"e.g. {EXAMPLE[1]} against {EXAMPLE[0]}",
    ).strip()
    return state.corrupt


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
    corrupt = corrupt_input(page)
    if not corrupt:
        st.info(md(f"Type the corrupted sentence, e.g. {code(EXAMPLE[1])} for {code(EXAMPLE[0])}."))
        return
    entry, state = page.entry, page.state
    try:
        result = cached.patched(page.lm, entry.path, entry.mtime, state.sentence, corrupt)
    except TranslationError as e:
        st.error(md(e))
        return
    step = len(result.prefix) - 1
    st.markdown(
        md(
            f"At step {step}, after “{' '.join(result.prefix)}”, the clean run writes "
            f"“{result.answer}” and the corrupted run “{result.wrong}”. Logit difference "
            f"(clean word − corrupted word): {result.clean_metric:+.2f} clean, "
            f"{result.corrupt_metric:+.2f} corrupted."
        )
    )
    about = f"“{state.sentence}” into “{corrupt}”"
    name = export_name(state.model, state.sentence, None, None, None, "patching")
    chart(figs.heads_figure(result.rows, about), "patch_heads", name=f"{name}_heads")
    chart(
        figs.stream_figure(result.rows, result.clean, result.prefix, about),
        "patch_stream",
        name=f"{name}_stream",
    )
    table = pd.DataFrame(result.rows)
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button("Patching table as CSV", csv, f"{name}.csv", "text/csv")
