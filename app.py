"""Attention Studio: the entry point (``streamlit run app.py``) and its home page.

Multipage by ``st.navigation`` + ``st.Page``: the page scripts live in ``pages/`` and are
registered here explicitly (only those whose file exists).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import streamlit as st

from core import jobs
from core.data import ATTRIBUTION

ROOT = Path(__file__).resolve().parent
PAGES = [  # (script, title, icon, what it is for)
    (
        "pages/train.py",
        "Train",
        ":material/model_training:",
        "configure and launch training, watch the curves live, stop, resume, compare runs",
    ),
    (
        "pages/translate.py",
        "Translate",
        ":material/translate:",
        "translate English sentences with a trained model (greedy or beam search)",
    ),
    (
        "pages/attention.py",
        "Attention",
        ":material/grid_on:",
        "inspect encoder, decoder and cross attention, head by head",
    ),
]


@st.cache_data(show_spinner=False)
def models_table(files: tuple[tuple[str, float, int], ...]) -> list[dict]:
    """Metadata of the models in checkpoints/ (keyed by name, mtime and size of each file)."""
    return jobs.list_models()


def checkpoint_files() -> tuple[tuple[str, float, int], ...]:
    """(name, mtime, size) of every *.pt in checkpoints/: the cache key of models_table."""
    root = jobs.checkpoints_root()
    paths = sorted(root.glob("*.pt")) if root.is_dir() else []
    return tuple((p.name, p.stat().st_mtime, p.stat().st_size) for p in paths)


def show_models() -> None:
    """The models saved in checkpoints/, or how to get one."""
    st.subheader("Models")
    models = models_table(checkpoint_files())
    if not models:
        st.info(
            "No models in checkpoints/ yet. Train a run, then use "
            "“Save as a model” on the Train page."
        )
        return
    rows = [
        {
            "model": m["name"],
            "best BLEU": m.get("best_bleu"),
            "step": m.get("step"),
            "size": m.get("size", ""),
            "from run": m.get("run", ""),
            "MB": m["size_mb"],
            "problem": m["error"],
        }
        for m in models
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        column_config={
            "best BLEU": st.column_config.NumberColumn(format="%.2f"),
            "MB": st.column_config.NumberColumn(format="%.1f"),
        },
    )


def show_runs() -> None:
    """The training runs on disk with their state."""
    st.subheader("Training runs")
    runs = jobs.list_runs()
    if not runs:
        st.info("No training runs yet.")
        return
    rows = [
        {
            "run": r.run_id,
            "state": r.state,
            "best BLEU": r.best_bleu,
            "started": dt.datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M")
            if r.started_at
            else "",
            "data": r.data,
            "size": r.size,
        }
        for r in runs[:20]
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        column_config={"best BLEU": st.column_config.NumberColumn(format="%.2f")},
    )


def home() -> None:
    """What the app is, the device, the models and runs, links to the pages."""
    st.title("Attention Studio")
    st.markdown(
        "Attention Studio trains the encoder-decoder Transformer of *Attention Is All You "
        "Need* (d2l.ai, chapter 11.7) to translate English into French, and lets you watch "
        "it learn. Then translate with the model you trained and look inside it: every "
        "attention head of the encoder, the decoder and the cross attention."
    )
    st.markdown(f"**Training device:** {jobs.device_summary()}")
    for script, title, icon, what in PAGES:
        if (ROOT / script).exists():
            st.page_link(script, label=f"{title}: {what}", icon=icon)
    show_models()
    show_runs()
    st.divider()
    st.caption(f"Data: {ATTRIBUTION}")


st.set_page_config(page_title="Attention Studio", layout="wide")
pages = [st.Page(home, title="Home", icon=":material/home:", default=True)]
pages += [
    st.Page(script, title=title, icon=icon)
    for script, title, icon, _ in PAGES
    if (ROOT / script).exists()
]
st.navigation(pages).run()
