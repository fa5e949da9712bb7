"""Attention page, "Over training" section: a probe sentence's maps through its run."""

from __future__ import annotations

import streamlit as st

from core.attention.maps import export_name, select_view
from core.attention.snapshots import SnapshotFrame, SnapshotSeries
from core.attention.word_maps import shown_maps
from core.figures import attention as figs
from core.figures.training import training_curve_figure
from core.model.capabilities import replay_problem
from core.runs.history import open_history
from pages.ui.attention import player
from pages.ui.attention.cached_trajectories import run_is_live
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.trajectories_view import (
    difference_panel,
    head_trajectories_now,
    trajectories_panel,
)
from pages.ui.cached import probe_noun, probe_sentences, snapshot_series
from pages.ui.charts import chart
from pages.ui.polling import CURVES_POLL_S
from pages.ui.text import md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import clamp_widget, write_url

PLAYER = "at_train"  # the play button's key
LATEST = -1  # ViewState.train_step: follow the latest snapshot
LIVE_POLL_S = CURVES_POLL_S  # between looks for a live run's new snapshots (bench/watch_cost.py)
URL_KEYS = ("train_step", "diff_from")
LIVE_WORDS = {
    True: "Training is running: the view follows new snapshots as they arrive.",
    False: "Training is running: move the slider to the last step to follow new snapshots.",
}


def training_section(page: SectionInputs) -> None:
    """Replay a probe sentence's attention over the training steps of the model's run."""
    state, source = page.state, page.entry.history
    steps = tuple(open_history(source).snapshot_steps()) if source else ()
    if problem := replay_problem(bool(source), len(steps)):
        st.info(md(problem))
        return
    probes = probe_sentences(source, steps)
    if not probes:
        st.info("The snapshots of this run cannot be read.")
        return
    noun = probe_noun(source, steps)  # "sequence" for a run whose probe is a token sequence
    probe = probe_picker(state, probes, noun)
    if state.sentence not in probes:  # the typed sentence has no recorded maps: say so
        st.caption(
            md(
                f"“{state.sentence}” is not among the sequences this run recorded, so it has "
                "no maps over training: at each evaluation a run keeps the maps of what it "
                "chose before it started (the Train form's probe sentences; a run scored by "
                "its circuits, the token sequence they read first). Showing one of them."
            )
        )
    series = snapshot_series(source, probe, steps)
    if series.skipped:
        st.warning("Some snapshots could not be read: " + md(", ".join(series.skipped)))
    if not series.frames:
        st.info(f"No snapshot holds “{md(probe)}”.")
        return
    live = run_is_live(page.entry.run_dir)
    if live and not player.playing(PLAYER):
        st.fragment(watch_snapshots, run_every=LIVE_POLL_S)(source, steps)
    result = head_trajectories_now(page, steps)
    row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
    player.play_button(PLAYER, state.train_step in (LATEST, series.steps[-1]), row)
    if live:
        row.caption(LIVE_WORDS[state.train_step == LATEST])
    st.fragment(replay, run_every=player.run_every(PLAYER))(page, probe, series, result)
    trajectories_panel(page, result, shown_step(series.steps, state.train_step), noun)


def watch_snapshots(source: str, steps: tuple) -> None:
    """A live run's new snapshots: rerun the page when one arrives (a cheap directory read)."""
    if tuple(open_history(source).snapshot_steps()) != steps:
        st.rerun()


def shown_step(steps: list[int], wanted: int) -> int:
    """The snapshot step to show: the latest for LATEST, else the last one at or before
    ``wanted`` (the first when it is before them all)."""
    if wanted == LATEST:
        return steps[-1]
    earlier = [s for s in steps if s <= wanted]
    return earlier[-1] if earlier else steps[0]


def snapshot_range(steps: list[int]) -> str:
    """A run's snapshot steps in words: "9 from 100 to 3,500"."""
    return f"{len(steps)} from {steps[0]:,} to {steps[-1]:,}"


def _picked(state: ViewState, steps: list[int]) -> None:
    """The slider moved: follow the latest step when it is at the end, else keep the step."""
    value = st.session_state["at_train_step"]
    state.train_step = LATEST if value == steps[-1] else value


def replay(page: SectionInputs, probe: str, series: SnapshotSeries, result) -> None:
    """The slider, the maps at its step and B − A (a fragment: it ticks while playing)."""
    state, steps = page.state, series.steps
    if state.train_step not in (LATEST, *steps):  # a link's step: the one at or before it
        state.why["train_step"] = f"not one of this run's snapshot steps, {snapshot_range(steps)}"
    index = steps.index(shown_step(steps, state.train_step))
    index = player.next_index(PLAYER, index, len(steps))
    if player.playing(PLAYER) or state.train_step != LATEST:
        state.train_step = steps[index]
    st.session_state["at_train_step"] = steps[index]
    step = st.select_slider(
        "Training step",
        steps,
        key="at_train_step",
        on_change=_picked,
        args=(state, steps),
        help="At the last step the view follows new snapshots of a run in progress.",
    )
    snapshot_at(page, probe, step, series, index)
    difference_panel(page, series, step, result)
    write_url(state, URL_KEYS)  # a fragment's own run does not reach the page's write_url
    player.rerun_if_stopped(PLAYER)


def probe_picker(state: ViewState, probes: list[str], noun: str = "sentence") -> str:
    """The probe shown (widget ``at_probe``), kept in the view state: "" for the sentence
    above when it is a probe, else the first; ``noun`` says what the probes are ("sentence",
    or "sequence": tokens a run scored by its circuits read)."""
    default = state.sentence if state.sentence in probes else probes[0]
    if state.probe and state.probe not in probes:
        state.drop("probe", f"not one of this run's probe {noun}s")
    clamp_widget("at_probe", state.probe or default, probes)
    probe = st.selectbox(
        f"Probe {noun}",
        probes,
        key="at_probe",
        help=f"The run recorded the maps of these {noun}s at each evaluation.",
    )
    if probe == state.asked.get("probe"):
        state.granted("probe")  # the default probe, asked by name
    state.probe = "" if probe == default else probe
    return probe


VALIDATION_LOSS_WORDS = "Plain cross-entropy of the validation sentences, dropout off."
INDUCTION_WORDS = (
    "The highest induction score of any head at this evaluation (core.training.circuits): its "
    "weight from a token of the repeat to the token that followed it the first time."
)


SMOOTHING_WORDS = "a smoothed loss stays above the plain cross-entropy even for a perfect model"
DROPOUT_WORDS = "dropout drops part of the model at every training step"  # off in validation


def training_loss_words(meta: dict) -> str | None:
    """Why the training loss reads higher than the validation loss, from the run's own
    settings: label smoothing, dropout or both, each with its reason (None: nothing to say)."""
    eps = (meta.get("train_config") or {}).get("label_smoothing") or 0
    dropout = (meta.get("model_config") or {}).get("dropout") or 0
    parts = [(f"label smoothing {eps:g}", SMOOTHING_WORDS)] * bool(eps)
    parts += [(f"dropout {dropout:g}", DROPOUT_WORDS)] * bool(dropout)
    if not parts:
        return None
    settings = " and ".join(name for name, _ in parts)
    why = "; ".join(reason for _, reason in parts)
    return (
        f"The training loss is measured as the model trained, with {settings} ({why}); "
        "the validation loss is plain cross-entropy with dropout off. Compare each with "
        "itself over steps, not the two with each other."
    )


def metrics_row(frame: SnapshotFrame, series: SnapshotSeries, smoothing: str | None) -> None:
    """Step, losses, and what else the run measured at its evaluations: validation BLEU
    (a run that translates), the best head's induction score (a run scored by its circuits)."""
    shown = [
        ("Training loss", frame.loss, "{:.3f}", smoothing),
        ("Validation loss", frame.val_loss, "{:.3f}", VALIDATION_LOSS_WORDS),
    ]
    if series.measured("val_bleu"):
        shown.append(("Validation BLEU", frame.val_bleu, "{:.1f}", None))
    if series.measured("induction"):
        shown.append(("Best induction score", frame.induction, "{:.2f}", INDUCTION_WORDS))
    cols = st.columns(len(shown) + 1)
    cols[0].metric("Step", f"{frame.step:,}")
    for col, (name, value, form, about) in zip(cols[1:], shown):
        col.metric(name, "—" if value is None else form.format(value), help=about)


def snapshot_at(page: SectionInputs, probe: str, step: int, series: SnapshotSeries, index: int):
    """The scores, output and maps of ``probe`` as the run saved them at ``step`` (its
    ``index`` in ``series``)."""
    state, source, frame = page.state, page.entry.history, series.frames[index]
    shown = shown_maps(frame.maps, state.words)
    smoothing = training_loss_words(page.lm.meta)
    metrics_row(frame, series, smoothing)
    if smoothing:
        st.caption(md(smoothing))
    if shown.output_tokens and shown.src_tokens:  # a translation (a one-stack pass: its tokens)
        st.markdown(f"Output at this step: **{md(' '.join(shown.output_tokens))}**")
    kind = shown.shown_kind(state.kind)  # a one-stack snapshot draws one kind
    layer = min(state.layer, shown.layers(kind) - 1)
    view = select_view(shown, kind, layer, state.head, state.hide)
    view.title += f" — training step {step:,}"
    name = export_name(state.model, probe, kind, layer, state.head, f"training step {step}")
    left, right = st.columns([3, 2])
    chart(figs.view_figure(view, page.stretch), "train_big", left, name)
    curve = training_curve_figure(source, step)
    chart(curve, "train_curve", right, export_name(state.model, "", what="training curve"))
    whole = figs.shows_full_grid(shown.layers(kind), shown.heads)
    grid_layers = None if whole else [layer]
    grid = figs.grid_view_figure(shown, kind, state.hide, grid_layers, page.stretch)
    what = f"grid training step {step}"
    grid_name = export_name(state.model, probe, kind, None if whole else layer, None, what)
    chart(grid, "train_grid", name=grid_name)
