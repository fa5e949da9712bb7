"""Home: what the app is, the device training would use, the models and the runs."""

from __future__ import annotations

import streamlit as st

from core.runs import catalogue as models
from core.runs import status as run_status
from core.runs.cpu_share import default_threads
from core.runs.table import HOME_COLUMNS
from core.training.devices import device_summary
from pages.ui.frame import PAGES, ensure_app_navigation, footer, page_links, unknown_page
from pages.ui.model_picker import model_entries
from pages.ui.text import code, spreadsheet_safe
from pages.ui.train.runs_table_view import TableView, runs_dataframe


def show_models() -> None:
    """Every model the app can offer, or how to get one."""
    st.subheader("Models")
    entries = model_entries()
    if not entries:
        st.info("No models yet. Train a run, then use “Save as a model” on the Train page.")
        return
    frame = models.models_frame(entries)
    st.dataframe(
        spreadsheet_safe(frame),
        hide_index=True,
        placeholder="—",
        column_config=models_columns(list(frame.columns)),
    )


MODELS_PX = 800  # the Models table's width in pixels: inside Home's column at a 1280 px window
FIXED_PX = {"model": 250, "origin": 130, "val BLEU": 70, "step": 60}  # fit their contents
WORDY = (  # the help of a column whose long cells end in "…"
    "A long entry ends in “…”: the line under the model picker on Translate and Attention "
    "shows it whole."
)


def models_columns(columns: list[str]) -> dict:
    """The Models table's columns, sized to fit MODELS_PX (a table cut at the right hid its
    last columns at 1280 px): the short ones to their contents, the wordy ones (size, data,
    problem) sharing what is left, their long cells ending in "…"."""
    wordy = [c for c in columns if c not in FIXED_PX]
    left = MODELS_PX - sum(FIXED_PX[c] for c in columns if c in FIXED_PX)
    share = left // max(1, len(wordy))
    config = {c: st.column_config.Column(width=FIXED_PX[c]) for c in columns if c in FIXED_PX}
    config["val BLEU"] = st.column_config.NumberColumn(format="%.2f", width=FIXED_PX["val BLEU"])
    config |= {c: st.column_config.TextColumn(width=share, help=WORDY) for c in wordy}
    return config


def show_runs() -> None:
    """The training runs on disk with their state."""
    st.subheader("Training runs")
    runs = run_status.list_runs()
    if not runs:
        st.info("No training runs yet.")
        return
    runs_dataframe(runs[:20], "home_runs", TableView(columns=HOME_COLUMNS), links=True)


def main() -> None:
    """The Home page."""
    ensure_app_navigation()
    st.title("Attention Studio")
    if page := unknown_page():
        names = ", ".join(title for _, title, _, _ in PAGES[1:])
        st.warning(f"There is no page {code('/' + page)}: this is Home. The pages are {names}.")
    st.markdown(
        "Attention Studio trains the encoder-decoder Transformer of *Attention Is All You "
        "Need* (d2l.ai, chapter 11.7) to translate English into French, and lets you watch "
        "it learn. Then translate with the model you trained and look inside it: every "
        "attention head of the encoder, the decoder and the cross attention."
    )
    st.markdown(f"**Training device:** {device_summary(default_threads())}")
    page_links()
    show_models()
    show_runs()
    footer()


main()
