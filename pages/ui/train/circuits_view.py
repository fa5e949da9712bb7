"""The Train page's circuits: every head's detector scores over training, the repeat's loss
and the phase change, for a run whose evaluations measure them."""

from __future__ import annotations

import streamlit as st

from core.figures.circuits import circuit_figures
from core.runs import status as run_status
from core.runs.circuit_history import circuit_evals, phase_of, phase_words
from pages.ui.shared_cache import shared


@shared()
def circuit_charts(signature: tuple) -> tuple[list, str] | None:
    """The circuit charts of one run and what their band is (None: its evaluations measure
    no circuits), rebuilt only when its metrics file grew (``signature`` from run_status;
    shared across sessions, never mutated)."""
    records = run_status.read_metrics(signature[0][0])
    evals = circuit_evals(records)
    if not evals:
        return None
    phase = phase_of(records)
    return circuit_figures(records, phase), phase_words(phase, len(evals))


def circuits_view(run_id: str) -> None:
    """The run's circuits forming (nothing for a run whose evaluations do not measure them)."""
    charts = circuit_charts(run_status.metrics_signature([run_id]))
    if charts is None:
        return
    figures, words = charts
    st.markdown("**Circuits forming** (random tokens read twice, scored at each evaluation)")
    st.caption(words)
    cols = st.columns(2)
    for i, fig in enumerate(figures):
        with cols[i % 2]:
            st.plotly_chart(fig, width="stretch")  # no key: replaced in place on each redraw
