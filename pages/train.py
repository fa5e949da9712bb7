"""Train: configure and launch a run, watch it learn live, stop / resume / compare / promote.

Widgets produce settings, ``core.jobs`` does the work; the run id lives in the URL.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from core import charts, jobs
from core.data import DataError, resolve_corpus
from core.presets import PRESETS
from pages._shared import ensure_app_navigation

PRESET_LABELS = {"d2l": "d2l chapter", "small": "small, CPU, ~10 minutes", "base": "base, GPU"}
DATA_KINDS = ["fra-eng", "file path", "upload"]
STATE_COLORS = {
    "starting": "blue",
    "running": "blue",
    "finished": "green",
    "stopped": "orange",
    "failed": "red",
}
STEPS = {
    "lr": 1e-4,
    "dropout": 0.05,
    "label_smoothing": 0.05,
    "val_fraction": 0.01,
    "test_fraction": 0.01,
    "time_budget": 60.0,
    "grad_clip": 0.1,
}
CHARTS = ["loss", "val_loss", "val_bleu", "lr", "tokens_per_s", "grad_norm"]
LOG_METRICS = {"loss", "val_loss", "lr", "grad_norm"}
POLL_S = 1.0


# ----------------------------------------------------------------------------- new run


def form_key(preset: str, section: str, name: str) -> str:
    """Widget key of one setting of one preset's form (each preset keeps its own widgets)."""
    return f"{preset}.{section}.{name}"


def seed_form(preset: str) -> None:
    """Give the preset's widgets their preset values, unless this session already set them.

    Keys carry the preset's name, so a browser that still reports another preset's
    values (a click that lands while the preset switch reruns) can never overwrite these.
    Streamlit forgets the widgets of a preset not shown, so their values are remembered.
    """
    memory = st.session_state.setdefault("form_memory", {}).setdefault(preset, {})
    for section, values in jobs.defaults(preset).items():
        for name, value in values.items():
            key = form_key(preset, section, name)
            if key not in st.session_state:
                default = "\n".join(value) if isinstance(value, list) else value
                st.session_state[key] = memory.get(key, default)


def remember_form(preset: str) -> None:
    """Keep this preset's widget values for when the user switches back to it."""
    memory = st.session_state["form_memory"][preset]
    for f in jobs.form_fields():
        key = form_key(preset, f.section, f.name)
        memory[key] = st.session_state[key]


def field_widget(preset: str, f: jobs.FormField) -> None:
    """One hyper-parameter widget; its value lives in session_state[preset.section.name]."""
    key = form_key(preset, f.section, f.name)
    if f.kind == "bool":
        st.checkbox(f.name, key=key, help=f.help)
    elif f.kind == "choice":
        st.selectbox(f.name, f.choices, key=key, help=f.help)
    elif f.kind == "list":
        st.text_area(f.name, key=key, help=f.help + " (one per line)", height=110)
    elif f.kind == "int":
        st.number_input(f.name, step=1, key=key, help=f.help)
    else:
        st.number_input(f.name, step=STEPS.get(f.name, 0.01), format="%g", key=key, help=f.help)


def settings_from_widgets(preset: str) -> dict:
    """{"data"|"model"|"train": {...}} read back from the preset's widgets."""
    out: dict = {section: {} for section in jobs.SECTIONS}
    for f in jobs.form_fields():
        value = st.session_state[form_key(preset, f.section, f.name)]
        if f.kind == "list":
            value = [line.strip() for line in value.splitlines() if line.strip()]
        out[f.section][f.name] = value
    return out


def fra_eng_picker() -> str:
    """fra-eng: say where it comes from; offer to download it now, with progress."""
    where = jobs.fra_eng_status()
    if where["available"]:
        st.caption(f"fra-eng: using the copy at `{where['path']}`.")
        return "fra-eng"
    st.caption("fra-eng is not downloaded yet (3.4 MB); the run downloads it when it starts.")
    if st.button("Download fra-eng now"):
        bar = st.progress(0.0, text="Downloading fra-eng.zip…")

        def update(done: int, total: int | None) -> None:
            bar.progress(
                min(1.0, done / total) if total else 0.0,
                text=f"Downloading fra-eng.zip… {done / 2**20:.1f} MB",
            )

        try:
            resolve_corpus("fra-eng", progress=update)
            st.success("fra-eng downloaded and verified.")
        except DataError as e:
            st.error(str(e))
    return "fra-eng"


def file_picker(kind: str) -> str | None:
    """A path or an upload of tab-separated pairs, checked and counted before launch."""
    try:
        if kind == "file path":
            path = st.text_input(
                "Path to a tab-separated file (English<TAB>French per line)",
                key="data_path",
                placeholder="/data/pairs.tsv",
            )
            if not path.strip():
                return None
            source = path.strip()
        else:
            up = st.file_uploader(
                "Tab-separated pairs (.tsv, .txt or .zip, up to "
                f"{jobs.MAX_UPLOAD_BYTES // 2**20} MB)",
                type=["tsv", "txt", "zip"],
                key="data_upload",
            )
            if up is None:
                return None
            source = str(jobs.stage_upload(up.name, up.getvalue()))
        info = jobs.inspect_data(source)
    except jobs.JobError as e:
        st.error(str(e))
        return None
    st.success(f"{info['usable']:,} usable pairs, {info['skipped']:,} skipped lines.")
    return source


def launch(preset: str, source: str | None) -> None:
    """Validate the form's settings and start the run, or say why not."""
    if source is None:
        st.error("Choose usable data first: a file path or an upload with sentence pairs.")
        return
    settings = settings_from_widgets(preset)
    settings["data"]["source"] = source
    problems = jobs.validate_settings(preset, settings)
    if problems:
        st.error("Not started. Fix these settings:\n" + "\n".join(f"- {p}" for p in problems))
        return
    try:
        run_id = jobs.start_run(preset, settings)
    except jobs.JobError as e:
        st.error(str(e))
        return
    st.query_params["run"] = run_id
    st.rerun()


def new_run_form() -> None:
    """Preset, data and every hyper-parameter (behind 'Advanced'), then Launch."""
    st.header("New run")
    preset = st.radio(
        "Preset",
        list(PRESETS),
        format_func=PRESET_LABELS.get,
        index=1,
        key="preset",
        captions=[jobs.describe_settings(jobs.defaults(p)) for p in PRESETS],
    )
    seed_form(preset)
    kind = st.radio("Data", DATA_KINDS, key="data_kind")
    source = fra_eng_picker() if kind == "fra-eng" else file_picker(kind)
    with st.form("new_run"):
        with st.expander("Advanced: every hyper-parameter"):
            for section, title in zip(jobs.SECTIONS, ("Data", "Model", "Training")):
                st.markdown(f"**{title}**")
                for f in jobs.form_fields():
                    if f.section == section:
                        field_widget(preset, f)
        remember_form(preset)
        st.caption(f"device 'auto' trains on: {jobs.device_summary()}")
        if st.form_submit_button("Launch training", type="primary", width="stretch"):
            launch(preset, source)


# ----------------------------------------------------------------------------- one run


def pick_run(runs: list[jobs.RunInfo]) -> jobs.RunInfo | None:
    """The run named in the URL (?run=...), or the newest; the choice goes back to the URL."""
    ids = [r.run_id for r in runs]
    wanted = st.query_params.get("run")
    if wanted and wanted not in ids:
        st.warning(f"Run '{wanted}' was not found (deleted?). Showing the newest run.")
    if not ids:
        return None
    index = ids.index(wanted) if wanted in ids else 0
    by_id = {r.run_id: r for r in runs}
    run_id = st.selectbox("Run", ids, index=index, format_func=lambda i: f"{i} · {by_id[i].data}")
    if st.query_params.get("run") != run_id:
        st.query_params["run"] = run_id
    return by_id[run_id]


def run_actions(info: jobs.RunInfo) -> None:
    """Stop, resume, delete (with confirmation)."""
    row = st.container(horizontal=True)
    try:
        if info.alive and row.button(
            "Stop", type="primary", disabled=info.stopping, help="Save a checkpoint, then stop"
        ):
            jobs.stop_run(info.run_id)
            st.rerun()
        if (
            info.resumable
            and info.state != "finished"
            and row.button("Resume", type="primary", help="Continue from the last checkpoint")
        ):
            jobs.resume_run(info.run_id)
            st.rerun()
        if not info.alive and row.button("Delete run…"):
            st.session_state["confirm_delete"] = info.run_id
    except jobs.JobError as e:
        st.error(str(e))
    if st.session_state.get("confirm_delete") == info.run_id and not info.alive:
        confirm_delete(info.run_id)


def confirm_delete(run_id: str) -> None:
    """Ask before deleting a run and its checkpoints."""
    st.warning(f"Delete run {run_id}, its metrics and checkpoints for good?")
    yes, no = st.columns(2)
    if yes.button("Yes, delete it", type="primary"):
        try:
            jobs.delete_run(run_id)
        except jobs.JobError as e:
            st.error(str(e))
            return
        st.session_state.pop("confirm_delete", None)
        del st.query_params["run"]
        st.rerun()
    if no.button("Cancel"):
        st.session_state.pop("confirm_delete", None)
        st.rerun()


def promote_form(info: jobs.RunInfo) -> None:
    """Save the run's best or last checkpoint under a name, for Translate and Attention."""
    choices = [w for w, ok in (("best", info.has_best), ("last", info.has_last)) if ok]
    if not choices or info.alive:
        return
    with st.expander("Save as a model (checkpoints/)"), st.form(f"promote-{info.run_id}"):
        which = st.radio(
            "Checkpoint",
            choices,
            horizontal=True,
            help="best: highest validation BLEU; last: end of training",
        )
        name = st.text_input(
            "Model name",
            placeholder="fra-small-v1",
            help="letters, digits, '.', '_' or '-' (at most 64)",
        )
        overwrite = st.checkbox("Replace a model with the same name")
        if st.form_submit_button("Save model"):
            try:
                path = jobs.promote(info.run_id, which, name, overwrite)
                st.success(f"Saved as {path.name}: pick it on the Translate page.")
            except jobs.JobError as e:
                st.error(str(e))


def run_header(info: jobs.RunInfo) -> None:
    """State badge and what the run is."""
    label = "stopping" if info.stopping else info.state
    st.badge(label, color=STATE_COLORS.get(info.state, "gray"))
    started = _when(info.started_at)
    st.caption(
        " · ".join(x for x in (f"started {started}", info.data, info.size, info.device) if x)
    )
    if info.message:
        (st.error if info.state == "failed" else st.info)(info.message)
    elif info.state == "starting":
        last = jobs.log_tail(info.run_id, 1)
        st.info(
            "Starting: loading the corpus and building the model…"
            + (f"\n\n`{last}`" if last else "")
        )


def progress_line(info: jobs.RunInfo) -> None:
    """Progress bar with step count and ETA."""
    steps = f"step {info.step:,}" + (f" of {info.total_steps:,}" if info.total_steps else "")
    eta = f" · ETA {charts.format_duration(info.eta_s)}" if info.live else ""
    st.progress(min(max(info.progress, 0.0), 1.0), text=f"{info.progress:.0%} · {steps}{eta}")


def chart_grid(run_id: str, compare: list[str], smoothing: float, log_y: bool) -> None:
    """Training curves of the run (and the runs compared with it)."""
    records = {rid: jobs.read_metrics(rid) for rid in [run_id, *compare]}
    cols = st.columns(3)
    for i, metric in enumerate(CHARTS):
        fig = charts.curves_figure(
            records, metric, smoothing, log_y and metric in LOG_METRICS, max_points=400, height=280
        )
        with cols[i % 3]:
            st.plotly_chart(fig, width="stretch", key=f"chart-{metric}")
    examples = next(
        (
            r["examples"]
            for r in reversed(records[run_id])
            if r.get("kind") == "eval" and r.get("examples")
        ),
        None,
    )
    if examples:
        st.markdown("**Latest validation examples**")
        st.dataframe(
            pd.DataFrame(examples).rename(
                columns={"src": "English", "out": "model output", "ref": "reference"}
            ),
            hide_index=True,
        )


def gpu_line(info: jobs.RunInfo) -> None:
    """Utilisation and memory of the GPU(s) while a CUDA run is live."""
    if not info.live or not info.device.startswith("cuda"):
        return
    for g in jobs.gpu_stats():
        st.caption(
            f"{g['name']}: {g['util']:.0f}% busy · {g['mem_used_mb'] / 1024:.1f} of "
            f"{g['mem_total_mb'] / 1024:.1f} GB"
        )


def status_view(run_id: str, was_live: bool) -> None:
    """State, progress with ETA and GPU use, re-read from the run directory."""
    try:
        info = jobs.run_info(run_id)
    except jobs.JobError as e:
        st.error(str(e))
        return
    if was_live and not info.live:
        st.rerun()  # the run ended: refresh the buttons and switch polling off
    run_header(info)
    progress_line(info)
    gpu_line(info)


def curves_view(run_id: str, compare: list[str], smoothing: float, log_y: bool) -> None:
    """Curves, latest examples and the log's last lines, re-read from the run directory."""
    chart_grid(run_id, compare, smoothing, log_y)
    with st.expander("Log (last lines)"):
        st.code(jobs.log_tail(run_id, 20) or "(empty)", language=None)


def run_panel(info: jobs.RunInfo, runs: list[jobs.RunInfo]) -> None:
    """Status, actions, chart controls and curves of one run (polled while it is live)."""
    poll = POLL_S if info.live and not st.session_state.get("paused") else None
    st.fragment(status_view, run_every=poll)(info.run_id, info.live)
    run_actions(info)
    others = [r.run_id for r in runs if r.run_id != info.run_id]
    c1, c2, c3 = st.columns([3, 2, 1.2], vertical_alignment="bottom")
    compare = c1.multiselect(
        "Compare with", others, key="compare", help="Overlay other runs on the same charts"
    )
    smoothing = c2.slider(
        "Smoothing",
        0.0,
        0.99,
        0.6,
        0.01,
        key="smoothing",
        help="Exponential moving average of the training curves",
    )
    log_y = c3.toggle("Log y-axis", key="log_y", help="Logarithmic y-axis for losses and rates")
    c3.toggle(
        "Pause updates",
        key="paused",
        disabled=not info.live,
        help="Stop redrawing the live charts (keeps your zoom)",
    )
    st.fragment(curves_view, run_every=poll)(
        info.run_id, [c for c in compare if c in others], smoothing, log_y
    )
    promote_form(info)


# ----------------------------------------------------------------------------- all runs


def _when(ts: float | None) -> str:
    """A local date and time, or '—'."""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "—"


def runs_table(runs: list[jobs.RunInfo]) -> None:
    """Every run with its state, start time, data, size and best BLEU."""
    st.header("All runs")
    if not runs:
        st.info("No runs yet: pick a preset and data, then press Launch training.")
        return
    rows = [
        {
            "run": r.run_id,
            "state": r.state,
            "best BLEU": r.best_bleu,
            "progress": r.progress,
            "started": _when(r.started_at),
            "data": r.data,
            "size": r.size,
            "device": r.device or r.device_kind,
        }
        for r in runs
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        key="runs_table",
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0),
            "best BLEU": st.column_config.NumberColumn("best BLEU", format="%.2f"),
        },
    )


def main() -> None:
    """The Train page."""
    ensure_app_navigation()  # a first request straight to /train must still run app.py
    st.title("Train")
    st.caption(
        "Train an English→French Transformer as a background job: it keeps going "
        "through reloads and closed tabs. The run id stays in the URL."
    )
    runs = jobs.list_runs()
    info = pick_run(runs)
    if info is not None:
        run_panel(info, runs)
    with st.sidebar:
        new_run_form()
    runs_table(runs)


main()
