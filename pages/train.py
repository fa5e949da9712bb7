"""Train: configure and launch a run, watch it learn live, stop / resume / compare / promote.

Widgets produce settings, ``core.runs.jobs`` does the work; the run id lives in the URL.
"""

from __future__ import annotations

import streamlit as st

from core.runs import status as run_status
from pages.ui.frame import ensure_app_navigation
from pages.ui.train.form import new_run_form
from pages.ui.train.launch_note import fold_key, form_open_at_first, just_launched, launched_note
from pages.ui.train.run_view import pick_run, run_panel, runs_table


def main() -> None:
    """The Train page."""
    ensure_app_navigation()  # a first request straight to /train must still run studio.py
    st.title("Train")
    st.caption(
        "Train a Transformer as a background job, English→French or an induction head "
        "forming on random tokens: it keeps going through reloads and closed tabs. The run "
        "id stays in the URL."
    )
    runs = run_status.list_runs()
    launched = just_launched()  # then the form is folded up and the new run shown below it
    # no icon: it would stand where the chevron says whether the form is open or folded
    with st.expander("New run", form_open_at_first(bool(runs)), key=fold_key("new_run")):
        new_run_form()
    if launched:
        launched_note(launched, runs)
    info = pick_run(runs)
    if info is not None:
        run_panel(info, runs)
    runs_table(runs)


main()
