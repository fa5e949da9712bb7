"""The Train page's view of runs: one run's state, actions and live curves; all runs."""

from __future__ import annotations

import time

import streamlit as st

from core.figures.circuits import mark_phase_change
from core.figures.tensorboard import tensorboard_zip
from core.figures.training import LOG_SCALE, METRICS, OPTIONAL, curves_figure, legend_key_html
from core.runs import exports, jobs
from core.runs import status as run_status
from core.runs.budget import TENSORBOARD_BYTES, size_words
from core.runs.circuit_history import phase_of
from core.runs.run_dir import RunDir, RunError
from core.runs.status import RunInfo
from core.training.devices import gpu_stats
from pages.ui.identity import current_user, not_yours
from pages.ui.polling import CURVES_POLL_S, POLL_S, TABLE_POLL_S
from pages.ui.shared_cache import shared
from pages.ui.text import code, md, spreadsheet_safe
from pages.ui.train.circuits_view import circuits_view
from pages.ui.train.layers_view import layers_view
from pages.ui.train.promote_view import promote_form
from pages.ui.train.run_actions import run_actions
from pages.ui.train.runs_table_view import (
    notes_form,
    runs_dataframe,
    settings_chart,
    settings_diff,
    table_controls,
)

PHASE_MARKED = ("loss", "val_loss")  # the curves the induction head's phase change is shaded on
JUST_LAUNCHED_S = 120.0  # a run this young is looked at again until it shows as live
STATE_COLORS = {
    "starting": "blue",
    "running": "blue",
    "finished": "green",
    "stopped": "orange",
    "failed": "red",
    "diverged": "red",
    "unknown": "gray",
}


def pick_run(runs: list[RunInfo]) -> RunInfo | None:
    """The run named in the URL (?run=...), or the newest; the choice goes back to the URL.
    A link to a run that is gone says so and shows no run (nothing to stop or delete by
    mistake) until one is picked."""
    ids = [r.run_id for r in runs]
    wanted = st.query_params.get("run")
    gone = bool(wanted) and wanted not in ids
    if gone:
        st.warning(
            f"Run '{md(wanted)}' is not on this server any more (deleted or renamed?)."
            + (" Pick a run below to see it." if ids else "")
        )
    if not ids:
        return None
    index = None if gone else ids.index(wanted) if wanted in ids else 0
    by_id = {r.run_id: r for r in runs}
    run_id = st.selectbox(
        "Run", ids, index=index, placeholder="Pick a run", format_func=lambda i: by_id[i].label
    )
    if run_id is None:
        return None
    if st.query_params.get("run") != run_id:
        st.query_params["run"] = run_id
    return by_id[run_id]


def run_header(info: RunInfo) -> None:
    """State badge and what the run is."""
    label = "stopping" if info.stopping else info.state
    st.badge(label, color=STATE_COLORS.get(info.state, "gray"))
    started = run_status.when(info.started_at)
    st.caption(
        md(" · ".join(x for x in (f"started {started}", info.data, info.size, info.device) if x))
    )
    if info.supervision:
        st.caption(md(info.supervision[0].upper() + info.supervision[1:] + "."))
    if info.stopping:
        st.info(
            "Stopping: the trainer saves a checkpoint, then exits. If it has not stopped "
            f"{run_status.STOP_GRACE_S:.0f} s after the request, it is killed."
        )
    if info.live and (not info.step or info.state == "starting"):  # loading: the progress
        last = run_status.log_message(info.run_id)  # line says what; the log's last line here
        if last:
            st.caption("Log: " + code(last))
    elif info.message:
        alarming = info.state in ("failed", "diverged", "unknown")
        (st.error if alarming else st.info)(md(info.message))
    if note := run_status.few_pairs_note(info):
        st.info(md(note))
    yours = not not_yours(info.owner, f"run {info.run_id}")  # the button shows to them only
    if note := run_status.short_run_note(info, yours):  # our own words, with **Train longer**
        st.warning(note, icon=":material/timer_off:")


def progress_line(info: RunInfo) -> None:
    """Progress bar with step count and ETA (before the first step, and while a resumed run
    loads: what it is doing and for how long)."""
    done = min(max(info.progress, 0.0), 1.0)
    if info.live and (not info.step or info.state == "starting"):
        st.progress(done, text=md(run_status.startup_words(info)))  # "learning BPE … for 2 min"
        return
    steps = f"step {info.step:,}" + (f" of {info.total_steps:,}" if info.total_steps else "")
    eta = ""
    if info.live:  # unknown until this launch has a pace (or a time budget), never "0 s"
        known = info.eta_s is not None
        eta = f" · ETA {run_status.format_duration(info.eta_s) if known else 'estimating…'}"
    st.progress(done, text=f"{info.progress:.0%} · {steps}{eta}")


@shared()
def curve_figures(
    signature: tuple, names: tuple, smoothing: float, log_y: bool, x_axis: str = "step"
) -> tuple[list, object]:
    """A curve figure per metric and the latest examples, rebuilt only when a metrics file grew.

    Shared across sessions and never mutated (``signature`` from run_status; ``names``: the
    legend name of each run, in the same order).
    """
    records = {
        name: run_status.read_metrics(run_id) for (run_id, *_), name in zip(signature, names)
    }
    phase = phase_of(records[names[0]]) if x_axis == "step" else None  # the run's, not others'
    figures = [
        mark_phase_change(
            curves_figure(
                records,
                metric,
                smoothing,
                log_y and metric in LOG_SCALE,
                max_points=300,
                height=280,
                legend=False,
                x_axis=x_axis,
            ),
            phase if metric in PHASE_MARKED else None,
        )
        for metric in METRICS
        if charted(metric, records)
    ]
    return figures, run_status.latest_examples(records[names[0]])


def charted(metric: str, records: dict[str, list[dict]]) -> bool:
    """Whether a metric gets a chart: an optional one where a run logged it, BLEU unless
    every run is measured by its circuits instead (the induction task translates nothing)."""
    logged = any(metric in r for rs in records.values() for r in rs)
    if metric == "val_bleu" and not logged:
        return not all(any("circuits" in r for r in rs) for rs in records.values())
    return metric not in OPTIONAL or logged


def chart_grid(
    run_id: str,
    compare: list[str],
    names: dict[str, str],
    smoothing: float,
    log_y: bool,
    x_axis: str = "step",
) -> None:
    """Training curves of the run (and the runs compared with it), named in the legends."""
    signature = run_status.metrics_signature([run_id, *compare])
    legend = tuple(names.get(rid, rid) for rid in [run_id, *compare])
    figures, examples = curve_figures(signature, legend, smoothing, log_y, x_axis)
    if compare:
        st.html(legend_key_html(list(legend)))  # one key for all the charts; it wraps
    cols = st.columns(3)
    for i, fig in enumerate(figures):
        with cols[i % 3]:
            st.plotly_chart(fig, width="stretch")  # no key: replaced in place on each redraw
    if not examples.empty:
        st.markdown("**Latest validation examples**")
        st.dataframe(spreadsheet_safe(examples), hide_index=True)


def gpu_line(info: RunInfo) -> None:
    """Utilisation and memory of the GPU(s) while a CUDA run is live."""
    if not info.live or not info.device.startswith("cuda"):
        return
    for g in gpu_stats():
        st.caption(
            f"{g['name']}: {g['util']:.0f}% busy · {g['mem_used_mb'] / 1024:.1f} of "
            f"{g['mem_total_mb'] / 1024:.1f} GB"
        )


def status_view(run_id: str, was_live: bool) -> None:
    """State, progress with ETA and GPU use, re-read from the run directory."""
    try:
        info = jobs.enforce_stop(run_id)  # kills a trainer that ignored a stop request
    except RunError as e:
        st.error(md(e))
        return
    if was_live != info.live:
        st.rerun()  # it ended, or its start showed late: the buttons and the polling follow
    run_header(info)
    progress_line(info)
    gpu_line(info)


def curves_view(
    run_id: str,
    compare: list[str],
    names: dict[str, str],
    smoothing: float,
    log_y: bool,
    x_axis: str = "step",
) -> None:
    """Curves, latest examples and the log's last lines, re-read from the run directory."""
    chart_grid(run_id, compare, names, smoothing, log_y, x_axis)
    circuits_view(run_id)  # an induction run's heads, scored at each evaluation
    layers = st.expander(  # stateful: its charts are built only while it is open
        "Layers: weight and gradient norms and distributions", key=LAYERS_OPEN, on_change="rerun"
    )
    if layers.open:
        with layers:
            layers_view(run_id)
    log_view(run_id)


def log_view(run_id: str, expanded: bool = False) -> None:
    """The last lines of the run's log, in an expander."""
    with st.expander("Log (last lines)", expanded=expanded):
        st.code(run_status.log_tail(run_id, 20) or "(empty)", language=None)


def run_panel(info: RunInfo, runs: list[RunInfo]) -> None:
    """Status, actions, chart controls and curves of one run (polled while it is live)."""
    live = info.live and not st.session_state.get("paused")
    poll, curves_poll = (POLL_S, CURVES_POLL_S) if live else (None, None)
    new = time.time() - (info.launched_at or 0) < JUST_LAUNCHED_S  # a read at its launch may
    status_poll = POLL_S if info.live or new else None  # miss its start: look again
    st.fragment(status_view, run_every=status_poll)(info.run_id, info.live)
    run_actions(info)
    compare = []
    if info.state == "failed" and not run_status.read_metrics(info.run_id):
        log_view(info.run_id, expanded=True)  # nothing to chart: its error and log say why
    else:
        compare = charts_panel(info, runs, curves_poll)
    downloads(info)
    settings_diff(runs, [info.run_id, *compare])
    name_form(info)
    notes_form(info)
    promote_form(info)


def charts_panel(info: RunInfo, runs: list[RunInfo], curves_poll: float | None) -> list[str]:
    """The chart controls (runs to compare, smoothing, scales, pausing) and the curves;
    returns the runs compared."""
    names = run_status.legend_names(runs)
    others = [r.run_id for r in runs if r.run_id != info.run_id]
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    compare = compare_picker(c1, others, names)
    smoothing = c2.slider(
        "Smoothing",
        0.0,
        0.99,
        0.6,
        0.01,
        key="smoothing",
        help="Exponential moving average of the training curves",
    )
    c3 = st.container(horizontal=True, gap="large")
    log_y = c3.toggle("Log y-axis", key="log_y", help="Logarithmic y-axis for losses and rates")
    c3.toggle(
        "Pause updates",
        key="paused",
        disabled=not info.live,
        help="Stop redrawing the live charts (keeps your zoom)",
    )
    x_axis = x_axis_picker()
    view = st.fragment(curves_view, run_every=curves_poll)
    view(info.run_id, compare, names, smoothing, log_y, x_axis)
    return compare


def downloads(info: RunInfo) -> None:
    """The run's metrics as CSV, its settings as JSON and a TensorBoard log (as the files
    are now)."""
    rd = RunDir(info.path)
    row = st.container(horizontal=True)
    row.download_button(
        "Metrics as CSV",
        lambda: exports.metrics_csv(rd),  # made on the click, not on every rerun
        file_name=f"{info.run_id}-metrics.csv",
        mime="text/csv",
        help="One row per record (training windows, evaluations), every metric a column",
    )
    row.download_button(
        "Settings as JSON",
        exports.config_json(rd),
        file_name=f"{info.run_id}-config.json",
        mime="application/json",
        help="The data, model and training settings the run was started with",
    )
    row.download_button(
        "TensorBoard log",
        lambda: tensorboard_zip(rd.path, info.run_id),  # made on the click
        file_name=f"{info.run_id}-tensorboard.zip",
        mime="application/zip",
        help="Scalars, weight and gradient distributions, settings and the probe sentences' "
        "maps as images, in TensorBoard's format: unzip, then `tensorboard --logdir .` "
        f"(at most {size_words(TENSORBOARD_BYTES)}; export.json says what was left out)",
    )


LAYERS_OPEN = "layers_open"  # the Layers expander's state: its figures only while it is open
SCROLLS = "scrolls-"  # a container key: the tables in it scroll sideways by design
X_LABELS = {"step": "step", "relative": "training time", "wall": "wall-clock time"}


def x_axis_picker() -> str:
    """The charts' x-axis (URL ``x``): step, minutes of training or wall-clock time."""
    if "x_axis" not in st.session_state:
        wanted = st.query_params.get("x", "step")
        st.session_state["x_axis"] = wanted if wanted in X_LABELS else "step"
    choice = (
        st.segmented_control(
            "x-axis",
            list(X_LABELS),
            format_func=X_LABELS.get,
            key="x_axis",
            help="Training time leaves out evaluations, as the time budget does; wall-clock "
            "time is when each record was written (runs recorded before it was logged have none)",
        )
        or "step"
    )
    if choice == "step":
        st.query_params.pop("x", None)
    else:
        st.query_params["x"] = choice
    return choice


def compare_picker(where, others: list[str], names: dict[str, str]) -> list[str]:
    """Runs to overlay, kept in the URL (``?compare=id,id``) so a link shows the same."""
    from_url = [c for c in st.query_params.get("compare", "").split(",") if c in others]
    if "compare" not in st.session_state or not set(st.session_state["compare"]) <= set(others):
        st.session_state["compare"] = from_url
    compare = where.multiselect(
        "Compare with",
        others,
        key="compare",
        format_func=lambda rid: names.get(rid, rid),
        help="Overlay other runs on the same charts",
    )
    if compare:
        st.query_params["compare"] = ",".join(compare)
    elif "compare" in st.query_params:
        del st.query_params["compare"]
    return compare


def name_form(info: RunInfo) -> None:
    """Give the run a name that says what it is (shown in pickers and legends)."""
    if not_yours(info.owner, f"run {info.run_id}"):
        return
    with st.expander("Name this run"), st.form(f"name-{info.run_id}"):
        name = st.text_input(
            "Name", value=info.name, max_chars=jobs.MAX_NAME_CHARS, placeholder="8 heads, lr 1e-3"
        )
        if st.form_submit_button("Save name"):
            try:
                jobs.rename_run(info.run_id, name, user=current_user())
            except RunError as e:
                st.error(md(e))
                return
            st.rerun()


def runs_table(runs: list[RunInfo]) -> None:
    """Every run with its settings, final metrics, note and tags (live while one runs),
    filtered and searched; their settings against their results in a chart."""
    st.header("All runs")
    if not runs:
        st.info("No runs yet: pick a preset and data, then press Launch training.")
        return
    view = table_controls(runs)
    live = any(r.live for r in runs)
    st.fragment(_runs_table_now, run_every=TABLE_POLL_S if live else None)(live, view)
    settings_chart(runs, view)


def _runs_table_now(was_live: bool, view) -> None:
    """The runs table re-read from disk (a fragment: it refreshes on its own)."""
    runs = run_status.list_runs()
    with st.container(key=f"{SCROLLS}runs"):  # a wide table by design: it scrolls sideways
        runs_dataframe(runs, "runs_table", view)
    if was_live and not any(r.live for r in runs):
        st.rerun()  # the last live run ended: switch polling off
