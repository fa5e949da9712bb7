"""The Train page's "Save as a model": a run's checkpoint copied under a name, with every
head's numbers over training measured into its history."""

from __future__ import annotations

import streamlit as st

from core.alignment.head_aer import store_in_history
from core.corpus.source import DataError
from core.model.checkpoints import CheckpointError, read_metadata
from core.runs.catalogue import ModelError
from core.runs.promotion import promote
from core.runs.run_dir import RunError, run_dir
from core.runs.status import RunInfo
from pages.ui.heavy_work import TimeLimit, heavy_slot
from pages.ui.identity import current_user, not_yours
from pages.ui.progress import progress_bar
from pages.ui.text import md

SAVED = "saved_models"  # session key: {run id: the file names this session saved from it}


def promote_form(info: RunInfo) -> None:
    """Save the run's best or last checkpoint under a name, for Translate and Attention.

    Only the button saves (Enter in the name sets it); what this session saved from the run
    stays said above the form."""
    choices = [w for w, ok in (("best", info.has_best), ("last", info.has_last)) if ok]
    if not choices or info.alive or not_yours(info.owner, f"run {info.run_id}"):
        return
    box = st.expander("Save as a model (checkpoints/)")
    saved_note(box, info.run_id)
    with box, st.form(f"promote-{info.run_id}", enter_to_submit=False):
        which = st.radio(
            "Checkpoint",
            choices,
            horizontal=True,
            help="best: highest validation BLEU (lowest validation loss for a run without "
            "BLEU: lm, masked-LM, induction); last: end of training",
        )
        name = st.text_input(
            "Model name",
            placeholder="fra-small-v1",
            help="letters, digits, '.', '_' or '-' (at most 64)",
        )
        overwrite = st.checkbox(
            "Replace a model with the same name",
            help="Only a model saved from a run, by you (or by anyone, for a teacher); never "
            "the shipped model",
        )
        heads = st.checkbox(
            "Keep every head's numbers over training",
            value=True,
            help="Measures every head on 100 validation sentences at each model the run kept "
            "(about a second each) and stores them in the model's .history file, for the "
            "Attention page's Over training section.",
        )
        if st.form_submit_button("Save model"):
            try:
                path = promote(info.run_id, which, name, overwrite, user=current_user())
            except ModelError as e:
                st.error(md(e))
                return
            saved = st.session_state.setdefault(SAVED, {}).setdefault(info.run_id, [])
            saved.append(path.name)
            st.success(saved_words(path.name))
            if heads and not path.is_dir():  # a model folder (decoder-only): no snapshots; its
                keep_trajectories(info, path)  # history carries its circuit scores instead


def saved_words(name: str) -> str:
    """What the page says of a model saved from a run."""
    return f"Saved as {md(name)}: pick it on the Translate and Attention pages."


def saved_note(where, run_id: str) -> None:
    """The models this session saved from the run, said again on every later run of the page
    (a save's own message lasts one run of it)."""
    names = st.session_state.get(SAVED, {}).get(run_id, [])
    if names:
        where.caption(" ".join(saved_words(n) for n in names[-3:]))


def keep_trajectories(info: RunInfo, path) -> None:
    """Measure the run's heads at its kept models into the saved model's history (with a bar)."""
    bar, report = progress_bar()
    with heavy_slot() as slot:
        try:
            if slot is None:
                raise ValueError("the server's heavy-work slot is not free")
            step = (read_metadata(path).get("state") or {}).get("step")
            store_in_history(run_dir(info.run_id).path, path, step, progress=report)
        except (DataError, CheckpointError, RunError, OSError, ValueError, TimeLimit) as e:
            st.warning(md(f"The model is saved, without its heads' numbers over training: {e}"))
        finally:
            bar.empty()
