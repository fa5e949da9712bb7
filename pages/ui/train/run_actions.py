"""The Train page's actions on one run, for its owner (or a teacher): stop, resume (after a
divergence with a lower learning rate; with how many processes), delete after a confirmation,
and train a finished or stopped run longer; each through ``core.runs.jobs``."""

from __future__ import annotations

import streamlit as st

from core.runs import jobs
from core.runs.run_dir import RunError
from core.runs.status import RunInfo
from pages.ui.identity import current_user, not_yours
from pages.ui.text import md


def run_actions(info: RunInfo) -> None:
    """Stop, resume, delete (with confirmation), train longer: for the run's owner or a
    teacher, where the server knows its users; others are told whose run it is."""
    if reason := not_yours(info.owner, f"run {info.run_id}"):
        st.caption(md(reason))
        return
    user = current_user()
    row = st.container(horizontal=True)
    resumable = info.resumable and info.state != "finished"  # (a finished run: train longer)
    processes = None
    try:
        if info.alive and row.button(
            "Stop", type="primary", disabled=info.stopping, help="Save a checkpoint, then stop"
        ):
            jobs.stop_run(info.run_id, user=user)
            st.rerun()
        if info.resumable and info.state == "diverged":
            lr = st.number_input(
                "Learning rate for the resumed run",
                min_value=1e-7,
                value=float(info.lr or 1e-3) / 2,
                format="%g",
                key=f"resume_lr_{info.run_id}",
                help="The run diverged: resume from its last finite checkpoint with a lower lr",
            )
        processes = resume_processes(info) if resumable else None
        if resumable and row.button(
            "Resume", type="primary", help="Continue from the last checkpoint"
        ):
            limits = {"lr": lr} if info.state == "diverged" else None
            jobs.resume_run(info.run_id, limits, processes, user=user)
            st.rerun()
        if not info.alive and row.button("Delete run…"):
            st.session_state["confirm_delete"] = info.run_id
    except RunError as e:
        st.error(md(e))
    if st.session_state.get("confirm_delete") == info.run_id and not info.alive:
        confirm_delete(info.run_id)
    if info.resumable and info.state in LONGER_STATES:
        train_longer(info, processes)


LONGER_STATES = ("finished", "stopped")  # the runs "Train longer" continues
MORE = {"minutes": 10, "steps": 1000}  # how much more "Train longer" offers at first


def train_longer(info: RunInfo, processes: int | None) -> None:
    """Continue a finished or stopped run for more minutes or steps of training (its limits
    replaced by that one): ``jobs.train_longer`` checks the owner, quota and processes."""
    with st.expander("Train longer", icon=":material/more_time:"):
        key = info.run_id
        unit_key = f"longer_unit_{key}"
        if unit_key not in st.session_state:
            st.session_state[unit_key] = "minutes" if info.time_budget else "steps"
        left, right = st.columns([1, 2], vertical_alignment="bottom")
        unit = left.radio("More", list(MORE), key=unit_key, horizontal=True)
        amount = right.number_input(  # no bounds: a bad number gets its reason on the click
            f"How many more {unit}",
            value=MORE[unit],
            step=5 if unit == "minutes" else 100,
            key=f"longer_{unit}_{key}",
            help="Training time (evaluations not counted) or optimiser steps after its last "
            "checkpoint; the run's other limits (epochs, steps or time) are lifted. A linear "
            "learning rate decays again to zero over the added part.",
        )
        st.caption(
            f"It stands at step {info.step:,}. It continues from its last checkpoint, as "
            "Resume does."
        )
        if processes is None:  # a finished run: the box belongs here
            processes = resume_processes(info)
        if st.button("Train longer", type="primary", key=f"longer_go_{key}"):
            more = {"minutes": float(amount)} if unit == "minutes" else {"steps": int(amount)}
            try:
                jobs.train_longer(info.run_id, processes=processes, user=current_user(), **more)
            except RunError as e:
                st.error(md(e))
                return
            st.rerun()


def resume_processes(info: RunInfo) -> int | None:
    """How many processes a resume uses: a box where more than one is possible, else None."""
    last, most = jobs.resume_processes(info.run_id)
    if most < 2:
        return None
    return int(
        st.number_input(
            "Processes for the resumed run",
            value=min(last, most),  # no bounds: a bad number gets its reason on Resume
            step=1,
            key=f"resume_processes_{info.run_id}",
            help=f"Training processes (GPUs, or CPU processes; at most {most} here) that "
            f"continue the run; its last launch used {last}. Resuming with another number "
            "continues exactly at an epoch's end; mid-epoch, the pairs left in that epoch are "
            "cut into new batches.",
        )
    )


def confirm_delete(run_id: str) -> None:
    """Ask before deleting a run and its checkpoints."""
    st.warning(f"Delete run {md(run_id)}, its metrics and checkpoints for good?")
    yes, no = st.columns(2)
    # not the blue of Launch: a destructive answer looks unlike the page's main action
    if yes.button("Yes, delete it", type="secondary", icon=":material/delete_forever:"):
        try:
            jobs.delete_run(run_id, user=current_user())
        except RunError as e:
            st.error(md(e))
            return
        st.session_state.pop("confirm_delete", None)
        del st.query_params["run"]
        st.rerun()
    if no.button("Cancel"):
        st.session_state.pop("confirm_delete", None)
        st.rerun()
