"""The Train page's new-run form: preset, data source and every setting, then Launch.

Each preset keeps its own widgets (keys ``<preset>.<group>.<field>``), so values of two
presets never mix.
"""

from __future__ import annotations

import time

import streamlit as st

from core.corpus import source
from core.corpus import user_files as corpus_files
from core.corpus.config import DataConfig
from core.corpus.source import DataError, fra_eng_copy, resolve_corpus
from core.corpus.splits import NO_VALIDATION, validation_pairs_at_most
from core.corpus.text import ATTRIBUTION
from core.places import DATA_ENV, data_root, shown_path
from core.runs import capacity, jobs
from core.runs.alignment_request import AlignmentChoice, alignment_problems
from core.runs.cpu_share import default_threads
from core.runs.run_dir import RunError
from core.training import settings
from core.training.devices import device_summary, resolve_device
from core.training.presets import PRESET_LABELS, PRESETS
from pages.ui.identity import current_user
from pages.ui.text import code, md
from pages.ui.train.alignment_inputs import alignment_choice, alignment_inputs
from pages.ui.train.launch_note import fold_key, note_launch

DATA_SOURCES = ["fra-eng", "file path", "upload"]
STEPS = {  # number_input steps of float settings (others step by 0.01)
    "lr": 1e-4,
    "dropout": 0.05,
    "label_smoothing": 0.05,
    "val_fraction": 0.01,
    "test_fraction": 0.01,
    "time_budget": 60.0,
    "grad_clip": 0.1,
}
OFFLINE_TOO = (  # what works without network, after a failed download
    "Without network: choose **upload** above and upload fra-eng.zip (or any "
    "English<TAB>French file), or ask whoever runs the server to set `FRA_ENG_ZIP` to a copy."
)
OFFLINE = (
    "fra-eng is not on this server, and its download site cannot be reached from here "
    "(no network?): a run on fra-eng would fail to start. " + OFFLINE_TOO
)
NO_LAUNCH = (  # beside the disabled Launch, while fra-eng can be neither read nor fetched
    "Launch is off: a run on fra-eng cannot get its data here. The induction preset "
    "trains offline (it makes its own sequences); or set Data above to a file path or an "
    "upload of a local English<TAB>French file."
)
_REACHABLE: dict = {}  # when fra-eng's host was last asked, and its answer


def form_key(preset: str, section: str, name: str) -> str:
    """Widget key of one setting of one preset's form (each preset keeps its own widgets)."""
    return f"{preset}.{section}.{name}"


def form_value(preset: str, f: settings.FormField):
    """The value a preset's widget starts from: this session's last one, else the preset's."""
    memory = st.session_state.setdefault("form_memory", {}).setdefault(preset, {})
    key = form_key(preset, f.group, f.name)
    if key in memory:
        return memory[key]
    value = settings.defaults(preset)[f.group][f.name]
    return "\n".join(value) if isinstance(value, list) else value


def remember_form(preset: str) -> None:
    """Keep this preset's widget values for when the user switches back to it (or shows a
    field again that this task or architecture hides)."""
    memory = st.session_state["form_memory"][preset]
    for f in settings.form_fields():
        key = form_key(preset, f.group, f.name)
        if key in st.session_state:
            memory[key] = st.session_state[key]


ADVANCED_COLUMNS = 3  # fields side by side in the Advanced expander (lists take a whole row)


FIELD_LABELS = {"arch": "Architecture", "task": "Task"}  # the choices above the form
ABOVE = tuple(FIELD_LABELS)  # shown above the form: the fields under it follow them at once


def field_label(f: settings.FormField) -> str:
    """A field's label in words ("label smoothing"); its help names the config field."""
    return FIELD_LABELS.get(f.name, f.name.replace("_", " "))


def advanced_group(preset: str, group: str, problems: list[str], task: str, arch: str) -> None:
    """One group's fields that mean something for this task and architecture, in columns
    (a list field on a row of its own), each with its problems under it."""
    fields_of = [
        f
        for f in settings.form_fields()
        if f.group == group and f.name not in ABOVE and settings.field_applies(f.name, task, arch)
    ]
    short = [f for f in fields_of if f.value_type != "list"]
    for start in range(0, len(short), ADVANCED_COLUMNS):
        for col, f in zip(st.columns(ADVANCED_COLUMNS), short[start : start + ADVANCED_COLUMNS]):
            with col:
                field_widget(preset, f)
                for problem in problems_of(f, problems):
                    st.error(md(problem), icon=":material/arrow_upward:")
    for f in (f for f in fields_of if f.value_type == "list"):
        field_widget(preset, f)
        for problem in problems_of(f, problems):
            st.error(md(problem), icon=":material/arrow_upward:")


def field_widget(preset: str, f: settings.FormField) -> None:
    """One hyper-parameter widget (key ``preset.section.name``), starting at form_value.

    The start value is the widget's own ``value``, never written into session_state: a
    browser that missed the run which wrote session_state (a quick click after a preset
    switch) would show, and send back, the widget's bare default (0, unchecked, empty).
    Keys carry the preset's name, so one preset's values never reach another's widgets.
    """
    key, value = form_key(preset, f.group, f.name), form_value(preset, f)
    label, about = (
        field_label(f),
        f"{f.help} (`{f.group}.{f.name}`, flag `--{f.name.replace('_', '-')}`)",
    )
    if f.value_type == "bool":
        st.checkbox(label, value, key=key, help=about)
    elif f.value_type == "choice":
        st.selectbox(label, f.choices, list(f.choices).index(value), key=key, help=about)
    elif f.value_type == "list":
        st.text_area(label, value, key=key, help=f"{about}; one per line", height=110)
    elif f.value_type == "int":
        st.number_input(label, value=value, step=1, key=key, help=about)
    else:
        step = STEPS.get(f.name, 0.01)
        st.number_input(label, value=float(value), step=step, format="%g", key=key, help=about)


def settings_from_widgets(preset: str) -> dict:
    """{"data"|"model"|"train": {...}} read back from the preset's widgets (a field hidden
    for this task or architecture: its last value, else the preset's)."""
    out: dict = {section: {} for section in settings.GROUPS}
    for f in settings.form_fields():
        key = form_key(preset, f.group, f.name)
        value = st.session_state[key] if key in st.session_state else form_value(preset, f)
        if f.value_type == "list":
            value = [line.strip() for line in value.splitlines() if line.strip()]
        out[f.group][f.name] = value
    return out


def fra_eng_picker() -> str | None:
    """fra-eng: say where it comes from and credit it; offer to download it now, with
    progress. None (with a warning saying what works instead) where there is no copy and
    its host cannot be reached: a run on it would fail to start."""
    st.caption(f"Data: {ATTRIBUTION}")  # where the corpus is chosen, as its licence asks
    copy = fra_eng_copy()
    if copy is not None:
        st.caption(f"fra-eng: using the copy at {code(shown_path(copy))}.")  # no server path
        return "fra-eng"
    if not fra_eng_host_reachable():
        st.warning(OFFLINE)
        return None
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
            st.error(md(f"{e} {OFFLINE_TOO}"))
    return "fra-eng"


def fra_eng_host_reachable() -> bool:
    """Whether fra-eng's host answers now, asked at most once a minute per server."""
    now = time.monotonic()
    if now - _REACHABLE.get("at", -1e9) > 60:
        _REACHABLE.update(at=now, ok=source.reachable())
    return _REACHABLE["ok"]


def file_picker(source_type: str, preset: str) -> str | None:
    """A path or an upload of tab-separated pairs, checked and counted before launch (with a
    warning when the preset's split leaves it nothing to validate on)."""
    try:
        info = path_picker() if source_type == "file path" else upload_picker()
    except DataError as e:
        st.error(md(e))
        return None
    if info is None:
        return None
    st.success(corpus_files.describe_counts(info))
    data = {f.name: form_value(preset, f) for f in settings.form_fields() if f.group == "data"}
    try:
        cfg = DataConfig(**settings.merged_settings(preset, {"data": data})["data"])
        val = validation_pairs_at_most(info["usable"], cfg)
    except (TypeError, ValueError, settings.SettingsError):
        val = None  # a setting the form will name on Launch
    if val == 0:
        st.warning(
            f"With {info['usable']:,} usable pairs and this split ({cfg.split}, "
            + (
                f"num_val {cfg.num_val}"
                if cfg.split == "head"
                else f"val_fraction {cfg.val_fraction:g}"
            )
            + "), the run gets **0 validation pairs**: "
            + NO_VALIDATION
            + ". Use more pairs, or raise val_fraction (Advanced › Data)."
        )
    return info["path"]  # resolved: a relative path means the data folder's file


def path_picker() -> dict | None:
    """A path in the data folder (created on first use), counted; None until one is typed."""
    folder = data_root()  # created here when missing: a fresh clone has no data/ yet
    path = st.text_input(
        "Path to a tab-separated file (English<TAB>French per line)",
        key="data_path",
        placeholder=f"pairs.tsv (in {shown_path(folder)})",
    )
    st.caption(
        f"The file must be in the data folder {code(shown_path(folder))} (the app creates it when "
        "missing; or in the corpus download cache); a relative path is read from there. "
        f"To use another folder, set {code(DATA_ENV)} before starting the app."
    )
    return corpus_files.inspect_data(path.strip()) if path.strip() else None


def upload_picker() -> dict | None:
    """An uploaded file of any type, staged and counted; what is wrong with it in one line
    naming the user's file (never the browser's "files are not allowed"); None until one."""
    up = st.file_uploader(
        f"Sentence pairs: {corpus_files.ACCEPTED}, up to "
        f"{corpus_files.MAX_UPLOAD_BYTES // 2**20} MB",
        key="data_upload",
    )
    if up is None:
        return None
    staged = corpus_files.stage_upload(up.name, up.getvalue())
    return corpus_files.inspect_upload(up.name, staged)


def processes_input(advanced) -> int:
    """How many processes train the run: one per GPU where several are visible (shown
    next to Launch), else CPU processes to try distributed training (in ``advanced``)."""
    auto = resolve_device("auto")
    most = capacity.max_processes(auto)
    if most < 2:
        return 1
    label, where = ("GPUs (training processes)", st) if auto == "cuda" else ("processes", advanced)
    return int(
        where.number_input(
            label,  # no min/max: the browser would block Launch without saying why
            value=1,
            step=1,
            key="processes",
            help="Train one run with several processes (on this machine, talking over "
            f"127.0.0.1; NCCL on GPUs, Gloo on CPUs; at most {most} here). Each takes "
            "batch_size pairs a step, so a step learns from batch_size × processes pairs: "
            "raise lr with it (see docs/training.md).",
        )
    )


PROBLEMS_KEY = "form_problems"  # {preset: the problems its last Launch met}


def check_form(preset: str, source: str | None) -> None:
    """Before the page runs on Launch: the problems of the form's values, kept so each
    shows under its own field (the Advanced expander open) as well as beside Launch."""
    found = []
    if source is not None:
        chosen = settings_from_widgets(preset)
        chosen["data"]["source"] = source
        processes = st.session_state.get("processes", 1)
        found = settings.form_problems(capacity.launch_problems(preset, chosen, processes))
        train = settings.merged_settings(preset, chosen)["train"]
        found += alignment_problems(alignment_choice(), train)
    st.session_state.setdefault(PROBLEMS_KEY, {})[preset] = found


def problems_of(f, problems: list[str]) -> list[str]:
    """The problems about one form field (those led by its group and name)."""
    lead = f"{settings.GROUP_TITLES[f.group]} › {f.name}"
    return [p for p in problems if p.startswith(lead + " ") or p.startswith(lead + ":")]


def launch(
    preset: str, source: str | None, processes: int = 1, alignment: AlignmentChoice | None = None
) -> None:
    """Validate the form's settings and start the run, or say why not."""
    if source is None:
        st.error("Choose usable data first: a file path or an upload with sentence pairs.")
        return
    chosen = settings_from_widgets(preset)
    chosen["data"]["source"] = source
    problems = settings.form_problems(capacity.launch_problems(preset, chosen, processes))
    problems += alignment_problems(alignment, settings.merged_settings(preset, chosen)["train"])
    if problems:
        st.error("Not started. Fix these settings:\n" + "\n".join(f"- {md(p)}" for p in problems))
        return
    try:
        run_id = jobs.start_run(preset, chosen, processes, current_user(), alignment=alignment)
    except RunError as e:
        st.error(md(e))
        return
    note_launch(run_id)  # the next run of the page folds the form and shows this run
    st.query_params["run"] = run_id
    st.rerun()


def url_choice(key: str, options: list[str], default: str) -> None:
    """Seed a radio from the URL (``?key=``) so a reload keeps the choice."""
    if key not in st.session_state:
        wanted = st.query_params.get(key)
        st.session_state[key] = wanted if wanted in options else default


def keep_in_url(key: str, value: str, default: str) -> None:
    """Write a form choice into the URL (dropped at its default)."""
    if value != default:
        st.query_params[key] = value
    elif key in st.query_params:
        del st.query_params[key]


def task_and_arch(preset: str) -> tuple[str, str]:
    """The "Task" and "Architecture" choices (the preset's widgets, outside the form: the
    fields below follow a change at once)."""
    above = [f for f in settings.form_fields() if f.name in ABOVE]
    for col, f in zip(st.columns(len(above)), above):
        with col:
            field_widget(preset, f)
    chosen = {f.name: st.session_state[form_key(preset, f.group, f.name)] for f in above}
    task, arch = chosen["task"], chosen["arch"]
    if task == "induction":
        st.caption(
            "Random tokens read twice, the loss on the repeat (Olsson et al. 2022): the run "
            "makes its own sequences, and its page draws every head's induction, previous-"
            "token and duplicate-token scores as they form."
        )
    return task, arch


def data_picker(preset: str) -> str | None:
    """The corpus of a translation or lm run: fra-eng, a file path or an upload (None: none usable;
    with fra-eng chosen, it cannot be had here)."""
    url_choice("data_source", DATA_SOURCES, "fra-eng")
    source_type = st.radio("Data", DATA_SOURCES, key="data_source", horizontal=True)
    keep_in_url("data_source", source_type, "fra-eng")
    return fra_eng_picker() if source_type == "fra-eng" else file_picker(source_type, preset)


def new_run_form() -> None:
    """Preset, data and every hyper-parameter (behind 'Advanced'), then Launch."""
    url_choice("preset", list(PRESETS), "small")
    preset = st.radio(
        "Preset",
        list(PRESETS),
        format_func=PRESET_LABELS.get,
        key="preset",
        captions=[settings.describe_settings(settings.defaults(p)) for p in PRESETS],
    )
    keep_in_url("preset", preset, "small")
    task, arch = task_and_arch(preset)
    reads = task != "induction"  # translation pairs, or (lm) their text: a corpus
    source = data_picker(preset) if reads else DataConfig.source  # induction: its own tokens
    blocked = reads and source is None and st.session_state.data_source == "fra-eng"
    if task == "translation" and arch == "encoder-decoder":  # a head of cross-attention
        alignment_inputs()  # outside the form: a choice shows its own inputs at once
    problems = st.session_state.get(PROBLEMS_KEY, {}).get(preset, [])
    with st.form("new_run", enter_to_submit=False):  # Enter sets a value; Launch launches
        advanced = st.expander(  # a new key after each launch: drawn closed (launch_note);
            "Advanced: every hyper-parameter",  # open, on a key of its own, on problems
            expanded=bool(problems),
            key=fold_key("advanced") + ("-problems" if problems else ""),
        )
        with advanced:
            for group in settings.GROUPS:
                st.markdown(f"**{settings.GROUP_TITLES[group]}**")
                advanced_group(preset, group, problems, task, arch)
        remember_form(preset)
        processes = processes_input(advanced)
        st.caption(f"device 'auto' trains on: {device_summary(default_threads())}")
        if blocked:
            st.caption(NO_LAUNCH)
        if st.form_submit_button(
            "Launch training",
            type="primary",
            width="stretch",
            on_click=check_form,
            args=(preset, source),
            disabled=blocked,
        ):
            launch(preset, source, processes, alignment_choice())
