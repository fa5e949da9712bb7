"""Attention page, "Over training": every head's trajectory, the stages heuristic, and B − A
between two steps of the run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.alignment.head_aer import head_trajectories
from core.attention.kinds import KIND_NAMES
from core.attention.maps import export_name
from core.attention.snapshots import SnapshotSeries
from core.attention.trajectories import (
    CIRCUIT_MEASURES,
    METRIC_NAMES,
    METRICS,
    SENTENCES,
    Trajectories,
)
from core.attention.trajectory_reading import (
    heads_like_the_maps,
    largest_change,
    map_difference,
    source_share_reading,
    specialisation,
    stages,
    step_difference,
)
from core.attention.word_maps import shown_maps
from core.corpus.source import DataError
from core.figures.trajectories import map_difference_figure, stage_figure, trajectory_figure
from core.model.checkpoints import CheckpointError
from core.places import trajectories_root
from core.runs.circuit_history import circuit_evals, phase_words
from core.runs.disk_cache import stored_keys
from core.runs.history import open_history
from pages.ui.attention import cached_trajectories as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.no_corpus import no_corpus
from pages.ui.charts import chart
from pages.ui.heavy_work import TimeLimit, heavy_slot
from pages.ui.progress import progress_bar
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_state import TRAJECTORY_BASES
from pages.ui.view_widgets import keep_choice, seed_choice, widget_default

BASIS_WORDS = {
    "probes": "probe sentences as translated at each snapshot (every step)",
    "validation": "validation sentences, teacher-forced (steps with a kept model)",
}
ONE_PASS_WORDS = "one pass over each snapshot's {noun}s (every step)"  # a one-stack run's


def basis_columns(noun: str) -> dict[str, str]:
    """Each basis's name in the tables and captions, the probes named as what they are
    (``noun``: "sentence", or "sequence" for a run whose probe is a token sequence:
    ``core.attention.snapshots.probe_noun``)."""
    return {"probes": f"probe {noun}s", "validation": "validation sentences"}


NO_DIFF = -1
STAGES_HOW = (
    "**A heuristic, not a measurement.** Voita et al. (2021) found that NMT training goes "
    "through a target-side language-model stage, then word-by-word translation, then "
    "reordering, by measuring how much predictions draw on the source. Attention weights "
    "cannot measure that; this reads two signals of the cross-attention heads on the probe "
    "sentences instead. *Source focus*: how far their entropy has fallen from its highest to "
    "its lowest (0–1); below ½ the decoder does not yet look at particular source words "
    "(target-side LM). *Cross diagonality*: from ½ focus until it peaks, word-by-word; a later "
    "drop of 0.02 or more with the focus kept is read as reordering. Short probe sentences "
    "make diagonality high from the start."
)
HEADS_HOW = (
    "A head's pattern at a step: ≥ ½ of its weight on the previous position (positional, "
    "Voita et al. 2019), on its own position (positional; cross: near the diagonal, "
    "monotonic), or on <bos>/<eos> (a sink). *Since*: the first step from which it kept the "
    "pattern it ends with. Syntactic and rare-word heads (Voita et al. 2019) need dependency "
    "parses and word frequencies, which this does not compute."
)


def head_trajectories_now(page: SectionInputs, steps: tuple) -> Trajectories:
    """The trajectories of the model's history: probe maps, and validation numbers on disk."""
    stored = stored_keys(trajectories_root())  # measured since, by any session: read again
    return cached.trajectories(page.entry.history, page.entry.path, steps, SENTENCES, stored)


def trajectories_panel(
    page: SectionInputs, result: Trajectories, step: int, noun: str = "sentence"
) -> None:
    """Every head's numbers over training, beside the loss; the stages; when heads specialise
    (``noun``: what the run's probes are, "sentence" or "sequence")."""
    st.subheader("Every head over training")
    source, state = page.entry.history, page.state
    for note in result.notes:
        st.warning(md(note))
    availability(result, noun)
    bases = [b for b in TRAJECTORY_BASES if not result.frame(b).empty]
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="medium")
    if state.traj_basis not in bases:
        state.drop("traj_basis", "not measured for this model")
    widget_default("at_traj_basis", state.traj_basis if state.traj_basis in bases else bases[0])
    state.traj_basis = basis = row.radio("Measured on", bases, key="at_traj_basis", horizontal=True)
    metrics = [m for m in METRICS if m in result.available()[basis]]
    seed_choice(state, "traj_metric", "at_traj_metric", metrics)
    metric = row.selectbox(
        "Number", metrics, key="at_traj_metric", format_func=lambda m: METRIC_NAMES[m]
    )
    keep_choice(state, "traj_metric", metric, metrics)
    table = result.frame(basis)
    marks = largest_change(table, metric)
    records = open_history(source).read_metrics()
    share = result.model_frame() if basis == "validation" else None
    kinds = list(dict.fromkeys(table["kind"]))  # a one-stack run's: its one kind
    one_pass = ONE_PASS_WORDS.format(noun=noun)
    words = BASIS_WORDS[basis] if "cross" in kinds or basis != "probes" else one_pass
    kind = state.kind if state.kind in kinds or not kinds else kinds[0]
    fig = trajectory_figure(table, metric, kind, marks, records, step, words, share, result.phase)
    chart(fig, "traj_lines", name=export_name(state.model, "", kind, what=f"{metric} heads"))
    if evals := len(circuit_evals(records)):  # a run scored by its circuits: the phase change
        st.caption(md(phase_words(result.phase, evals)))
    if result.pending:
        measure_button(page, result)
    stages_and_heads(result, noun)


def steps_words(steps: list[int]) -> str:
    """Steps in a few words: "14 steps: 250 to 3,500, every 250" (a full list was cut)."""
    if len(steps) <= 3:
        return ", ".join(f"{s:,}" for s in steps) or "none"
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    every = f", every {gaps.pop():,}" if len(gaps) == 1 else ""
    return f"{len(steps)} steps: {steps[0]:,} to {steps[-1]:,}{every}"


def availability(result: Trajectories, noun: str) -> None:
    """Which numbers each basis has (a row per number, a column per basis) and at which steps
    (a wide table of both was cut at 760 px); ``noun``: what the probes are."""
    names = basis_columns(noun)
    have = result.available()
    scored = {m for ms in have.values() for m in ms}  # circuit scores: a run that measured them
    shown = [m for m in METRICS if m not in CIRCUIT_MEASURES or m in scored]
    columns, steps = {}, []
    for basis, kept in (("probes", result.steps), ("validation", result.model_steps)):
        done = sorted(set(result.frame(basis)["step"])) if kept else []
        columns[names[basis]] = ["✓" if m in have[basis] else "—" for m in shown]
        steps.append(f"{names[basis]}: {steps_words(done)}")
    table = pd.DataFrame({"number": [METRIC_NAMES[m] for m in shown], **columns})
    st.dataframe(spreadsheet_safe(table), hide_index=True)
    st.caption("Steps measured: " + "; ".join(steps) + ".")  # numbers and our words
    st.caption(
        "The validation numbers, AER (cross heads, AWO links on the shipped gold set) and the "
        "source share (ALTI+) need the model of that step: a run keeps one at up to "
        "`snapshot_models` evaluations (default 20), besides best.pt and last.pt; a model "
        "saved from a run carries them in its .history file."
        + (
            " From the probe maps alone, AER is measured only where a probe sentence and its "
            "output are a gold pair."
            if noun == "sentence"
            else ""
        )
    )


def measure_button(page: SectionInputs, result: Trajectories) -> None:
    """Measure the validation numbers of the saved checkpoints not measured yet."""
    n = len(result.pending)
    label = f"Measure on {SENTENCES} validation sentences at {n} saved step{'s' * (n != 1)}"
    if not st.button(label, key="at_traj_measure"):
        return
    bar, report = progress_bar()
    with heavy_slot() as slot:
        if slot is None:
            bar.empty()
            return
        try:
            head_trajectories(page.entry.history, page.entry.path, SENTENCES, progress=report)
        except DataError as e:
            bar.empty()
            no_corpus("The validation numbers cannot be measured here", e)
            return
        except (CheckpointError, OSError, ValueError, TimeLimit) as e:
            bar.empty()
            st.error(md(f"The validation numbers cannot be measured: {e}"))
            return
    bar.empty()
    st.rerun()


def stages_and_heads(result: Trajectories, noun: str) -> None:
    """The stages heuristic over the run, and when each head took its pattern (one below the
    other: beside the chart, the table's columns were cut at 760 px); ``noun``: what the
    probes are."""
    probes = result.frame("probes")
    found = stages(probes)
    if "cross" not in set(probes["kind"]):  # a one-stack run's pass over a sequence
        st.caption("The stages heuristic reads cross-attention heads; these snapshots hold none.")
    elif found is None:
        st.info("The stages need at least three snapshots.")
    else:
        st.markdown(f"**Stages (heuristic):** {md(found.summary())}.")
        chart(stage_figure(found), "traj_stages", name="training stages")
        st.caption(STAGES_HOW)
    if reading := source_share_reading(result.model_frame()):
        st.markdown(f"**Measured:** {md(reading[0].upper() + reading[1:])}.")
    heads = specialisation(probes)
    heads["kind"] = heads["kind"].map(KIND_NAMES)
    st.markdown(f"**When heads specialise** (probe {noun}s)")
    st.dataframe(spreadsheet_safe(heads), hide_index=True, height=300, placeholder="—")
    st.caption(HEADS_HOW)


def difference_panel(
    page: SectionInputs, series: SnapshotSeries, step_b: int, result: Trajectories
) -> None:
    """B − A of the probe's maps between another step A and the step shown (B), the most
    changed heads first, and every head's numbers at A and B."""
    state = page.state
    options = [NO_DIFF, *[s for s in series.steps if s != step_b]]
    if state.diff_from not in options:  # a link's step A: none of the others
        state.why["diff_from"] = f"not one of this run's other snapshot steps (B is {step_b:,})"
    widget_default("at_diff_from", state.diff_from if state.diff_from in options else NO_DIFF)
    if st.session_state["at_diff_from"] not in options:  # B moved onto A
        st.session_state["at_diff_from"] = NO_DIFF
    state.diff_from = st.selectbox(
        "Compare with step (A)",
        options,
        key="at_diff_from",
        format_func=lambda s: "no comparison" if s == NO_DIFF else f"step {s:,}",
        help="Show B − A, B the step above, for every head of the chosen kind.",
    )
    if state.diff_from == NO_DIFF:
        return
    frames = dict(zip(series.steps, series.frames))
    a = shown_maps(frames[state.diff_from].maps, state.words)
    b = shown_maps(frames[step_b].maps, state.words)
    kind = a.shown_kind(state.kind)  # a one-stack snapshot draws one kind
    diff = map_difference(a, b, kind)
    fig = map_difference_figure(diff, kind, state.diff_from, step_b)
    what = f"step {step_b} minus {state.diff_from}"
    chart(fig, "train_diff", name=export_name(state.model, series.sentence, kind, what=what))
    table = step_difference(result.frame("probes"), state.diff_from, step_b, "entropy")
    table = heads_like_the_maps(table, diff, kind).rename(
        columns={
            "a": f"entropy at {state.diff_from:,}",
            "b": f"entropy at {step_b:,}",
            "B − A": "entropy B − A",
        }
    )
    st.caption(
        f"{md(diff.note) + '. ' if diff.note else ''}Heads ordered by how much their map "
        "changed (mean |B − A| over the cells), as in the grid above; beside it, their "
        "entropy at A and B."
    )
    number = st.column_config.NumberColumn(format="%.3f")
    numbers = {c: number for c in table.columns if c not in ("layer", "head")}
    st.dataframe(spreadsheet_safe(table), hide_index=True, column_config=numbers)
