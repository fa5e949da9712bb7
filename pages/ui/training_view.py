"""Attention page, "Over training" section: a probe sentence's maps through its run."""

from __future__ import annotations

import streamlit as st

from core.attention.maps import export_name, select_view
from core.attention.snapshots import SnapshotFrame
from core.attention.word_maps import shown_maps
from core.figures import attention as figs
from core.figures.training import training_curve_figure
from core.runs.history import open_history
from pages.ui.cached import probe_sentences, snapshot_series
from pages.ui.charts import chart
from pages.ui.section_inputs import SectionInputs
from pages.ui.text import md
from pages.ui.view_widgets import clamp_widget


def training_section(page: SectionInputs) -> None:
    """Replay a probe sentence's attention over the training steps of the model's run."""
    state, source = page.state, page.entry.history
    steps = tuple(open_history(source).snapshot_steps()) if source else ()
    if not steps:
        st.info(
            "This model has no recorded attention snapshots. Runs trained from the Train "
            "page save the probe sentences' maps at every evaluation, and a model saved "
            "from a run keeps them in a .history file beside it."
        )
        return
    probes = probe_sentences(source, steps)
    if not probes:
        st.info("The snapshots of this run cannot be read.")
        return
    clamp_widget("at_probe", state.sentence if state.sentence in probes else probes[0], probes)
    probe = st.selectbox(
        "Probe sentence",
        probes,
        key="at_probe",
        help="The run recorded the maps of these sentences at each evaluation.",
    )
    series = snapshot_series(source, probe, steps)
    if series.skipped:
        st.warning("Some snapshots could not be read: " + md(", ".join(series.skipped)))
    if not series.frames:
        st.info(f"No snapshot holds “{md(probe)}”.")
        return
    clamp_widget("at_train_step", series.steps[-1], series.steps)
    step = st.select_slider("Training step", series.steps, key="at_train_step")
    snapshot_at(page, probe, step, series.frames[series.steps.index(step)])


def snapshot_at(page: SectionInputs, probe: str, step: int, frame: SnapshotFrame) -> None:
    """The scores, output and maps of ``probe`` as the run saved them at ``step``."""
    state, source = page.state, page.entry.history
    shown = shown_maps(frame.maps, state.words)
    cols = st.columns(4)
    cols[0].metric("Step", f"{step:,}")
    for col, name, value in (
        (cols[1], "Training loss", frame.loss),
        (cols[2], "Validation loss", frame.val_loss),
        (cols[3], "Validation BLEU", frame.val_bleu),
    ):
        col.metric(
            name, "—" if value is None else f"{value:.3f}" if "loss" in name else f"{value:.1f}"
        )
    st.markdown(f"Output at this step: **{md(' '.join(shown.output_tokens))}**")
    layer = min(state.layer, shown.layers(state.kind) - 1)
    view = select_view(shown, state.kind, layer, state.head, state.hide)
    view.title += f" — training step {step:,}"
    name = export_name(state.model, probe, state.kind, layer, state.head, f"training step {step}")
    left, right = st.columns([3, 2])
    chart(figs.view_figure(view, page.stretch), "train_big", left, name)
    curve = training_curve_figure(source, step)
    chart(curve, "train_curve", right, export_name(state.model, "", what="training curve"))
    whole = figs.shows_full_grid(shown.layers(state.kind), shown.heads)
    grid_layers = None if whole else [layer]
    grid = figs.grid_view_figure(shown, state.kind, state.hide, grid_layers, page.stretch)
    what = f"grid training step {step}"
    grid_name = export_name(state.model, probe, state.kind, None if whole else layer, None, what)
    chart(grid, "train_grid", name=grid_name)
