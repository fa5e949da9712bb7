"""Train page, a run's "Layers" panel: each layer group's weight and gradient norms over
training, and their distributions drawn as TensorBoard draws them (core.figures.layers)."""

from __future__ import annotations

import streamlit as st

from core.figures import layers as layer_figs
from core.runs import status as run_status

DRAW_MODES = {  # TensorBoard's two views of a distribution over training
    "Distributions": layer_figs.distribution_figure,
    "Histograms": layer_figs.histogram_overlay_figure,
}
DRAW_NOTES = {
    "Distributions": "Bands as TensorBoard draws them, outside in: minimum to maximum, then "
    "the middle 86.6 %, 68.3 % and 38.3 % of the values (a normal distribution's ±1.5σ, ±1σ "
    "and ±0.5σ); the line is the median. Gradients are those of the last step before each "
    "evaluation.",
    "Histograms": "Each evaluation's histogram over its own range (20 equal bins from the "
    "group's minimum to its maximum), as density; darker lines are later evaluations. "
    "Gradients are those of the last step before each evaluation.",
}


def layers_view(run_id: str) -> None:
    """Each layer group's norms over training and its weights' and gradients' distributions."""
    records = run_status.read_metrics(run_id)
    if not any("layer_norms" in r for r in records):
        st.caption("This run logged no layer norms (runs started before they were logged).")
        return
    left, right = st.columns(2)
    left.plotly_chart(layer_figs.norms_figure(records, "weights"), width="stretch")
    right.plotly_chart(layer_figs.norms_figure(records, "grads"), width="stretch")
    groups = layer_figs.histogram_groups(records)
    if not groups:
        return
    c1, c2 = st.columns([2, 3], vertical_alignment="bottom")
    group = c1.selectbox("Layer group", groups, key="hist_group")
    if not layer_figs.has_distributions(records):
        st.caption("This run logged fixed-bin weight histograms (before distributions were).")
        st.plotly_chart(layer_figs.histogram_figure(records, group), width="stretch")
        return
    mode = c2.radio("Draw", DRAW_MODES, horizontal=True, key="hist_mode")
    figure = DRAW_MODES[mode]
    left, right = st.columns(2)
    left.plotly_chart(figure(records, group, "weights"), width="stretch")
    right.plotly_chart(figure(records, group, "grads"), width="stretch")
    st.caption(DRAW_NOTES[mode])
