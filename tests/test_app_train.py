"""AppTest tests of the Train page (one real tiny training run)."""

from __future__ import annotations

import json
import time

import pytest
from streamlit.testing.v1 import AppTest

from core.places import DATA_ENV, checkpoints_root, data_root, runs_root
from core.runs import capacity, jobs
from core.runs import status as run_status
from core.runs.processes import check_trainer
from core.runs.run_dir import RunDir
from core.training import settings
from tests.helpers import (
    TINY_JOB,
    TINY_PRESET,
    assert_clean,
    fake_trainer,
    form_values,
    plain,
    run_app,
    run_dirs,
    wait_for,
)


def train_page(run_id: str | None = None) -> AppTest:
    """The Train page (optionally with ?run=run_id), run once."""
    at = run_app()
    if run_id:
        at.query_params["run"] = run_id
    at.switch_page("pages/train.py")
    at.run()
    assert_clean(at)
    return at


def button(at: AppTest, label: str):
    """The button labelled ``label`` (form submit buttons included)."""
    found = [b for b in at.button if b.label == label]
    assert found, f"no '{label}' button among {[b.label for b in at.button]}"
    return found[0]


def fill_tiny_form(at: AppTest, **overrides) -> None:
    """The tiny job's settings (tests.helpers.TINY_JOB) typed into the form, then overrides."""
    at.radio(key="preset").set_value(TINY_PRESET).run()
    at.radio(key="data_source").set_value("file path").run()
    at.text_input(key="data_path").set_value(TINY_JOB["data"]["source"]).run()
    value_types = {f"{f.group}.{f.name}": f.value_type for f in settings.form_fields()}
    widgets = {"choice": at.selectbox, "list": at.text_area, "bool": at.checkbox}
    for key, value in {**form_values(TINY_JOB), **overrides}.items():
        widget = widgets.get(value_types[key], at.number_input)
        widget(key=f"{TINY_PRESET}.{key}").set_value(value)


def tick(at: AppTest) -> bool:
    """Rerun the page after a moment (AppTest never fires run_every: tick by hand)."""
    time.sleep(0.3)
    at.run()
    return True


def badges(at: AppTest) -> list[str]:
    """The state badges on the page (markdown like ':green-badge[finished]')."""
    return [m.value for m in at.markdown if "-badge[" in m.value]


def loss_points(at: AppTest) -> list:
    """x values of the training-loss chart's smoothed trace of the selected run."""
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["title"]["text"].startswith("training loss")
    return spec["data"][-1]["x"] if spec["data"] else []


# ----------------------------------------------------------------------------- form


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("model.num_heads", 3, "must be divisible by num_heads (3)"),
        ("model.num_encoder_layers", 0, "num_encoder_layers must be at least 1"),
        ("train.batch_size", 10_000_000, "batch_size must be at most 65,536"),
        ("model.max_positions", 2_000_000_000, "max_positions must be at most 4,096"),
        ("model.dropout", 1.5, "dropout must be in [0, 1)"),
    ],
)
def test_form_refuses_impossible_settings_with_the_reason(jobs_env, key, value, reason):
    at = train_page()
    fill_tiny_form(at, **{key: value})
    button(at, "Launch training").click().run()
    assert any(reason in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert run_dirs(runs_root()) == []  # nothing started


def test_a_problem_shows_under_its_field_says_where_it_sits_and_never_names_a_hidden_one(
    jobs_env,
):
    """Errors were listed only beside Launch, with names of fields the form does not show
    (src_vocab_size); each now sits under its own field too, in the opened Advanced
    expander, led by its group; a vocabulary size the data decides is left to max_vocab."""
    at = train_page()
    fill_tiny_form(at, **{"model.num_heads": 3, "data.max_vocab": 10_000_000})
    button(at, "Launch training").click().run()
    bottom = [plain(e.value) for e in at.error if "Not started" in e.value]
    assert bottom and "Model › d_model" in bottom[0] and "Data › max_vocab" in bottom[0]
    assert "vocab_size" not in bottom[0]
    advanced = next(x for x in at.expander if x.label.startswith("Advanced"))
    under = [plain(e.value) for e in advanced.error]
    assert any(e.startswith("Model › d_model") for e in under), under
    assert any(e.startswith("Data › max_vocab") for e in under), under
    assert run_dirs(runs_root()) == []


@pytest.mark.parametrize("processes", [0, -3, 99])
def test_form_refuses_an_impossible_number_of_processes_with_the_reason(
    jobs_env, monkeypatch, processes
):
    monkeypatch.setattr(capacity, "max_processes", lambda device_type: 4)
    at = train_page()
    fill_tiny_form(at)
    box = at.number_input(key="processes")
    assert box.min is None and box.max is None  # the browser never blocks Launch silently
    box.set_value(processes)
    button(at, "Launch training").click().run()
    errors = [plain(e.value) for e in at.error]
    assert any("Not started. Fix these settings" in e and "processes" in e for e in errors), errors
    assert run_dirs(runs_root()) == []  # nothing started


def test_data_file_is_counted_before_launch(jobs_env, tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    pairs = data_root() / "mine.tsv"
    pairs.write_text("Go.\tVa !\nnot a pair\nHi.\tSalut.\n")
    at = train_page()
    at.radio(key="data_source").set_value("file path").run()
    assert at.text_input(key="data_path").placeholder == "pairs.tsv (in data/)"
    assert any("data folder `data/`" in c.value for c in at.caption)  # no server path
    assert not any(str(data_root()) in c.value for c in at.caption)
    at.text_input(key="data_path").set_value("mine.tsv").run()  # read from the data folder
    assert [s.value for s in at.success] == ["2 usable pairs, 1 skipped line."]
    at.text_input(key="data_path").set_value(str(data_root() / "missing.tsv")).run()
    assert any("Corpus file not found" in e.value for e in at.error)
    button(at, "Launch training").click().run()
    assert any("Choose usable data first" in e.value for e in at.error)


def test_the_data_folder_exists_once_the_file_path_option_names_it(jobs_env, tmp_path, monkeypatch):
    folder = tmp_path / "fresh clone" / "data"
    monkeypatch.setenv(DATA_ENV, str(folder))
    at = train_page()
    at.radio(key="data_source").set_value("file path").run()
    assert folder.is_dir()
    caption = next(plain(c.value) for c in at.caption if "data folder" in c.value)
    assert "creates it" in caption and str(folder) not in caption


@pytest.mark.parametrize("where", ["outside.tsv", "../outside.tsv", "/etc/passwd", "/dev/zero"])
def test_data_path_outside_the_data_folder_is_refused(jobs_env, tmp_path, monkeypatch, where):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    (tmp_path / "outside.tsv").write_text("Go.\tVa !\n")
    source = str(tmp_path / where) if where == "outside.tsv" else where
    at = train_page()
    at.radio(key="data_source").set_value("file path").run()
    at.text_input(key="data_path").set_value(source).run()
    assert_clean(at)
    assert not at.success and len(at.error) == 1
    message = plain(at.error[0].value)
    assert "outside" in message and "data folder (data/)" in message and DATA_ENV in message
    assert str(tmp_path) not in message  # no folder of the server


def uploaded(data: bytes, name: str = "pairs.tsv"):
    """The Train page with ``data`` uploaded as its corpus."""
    at = train_page()
    at.radio(key="data_source").set_value("upload").run()
    at.file_uploader(key="data_upload").set_value((name, data, "text/tab-separated-values"))
    return at.run()


def test_upload_is_validated_and_counted(jobs_env):
    at = uploaded(b"Go.\tVa !\nHi.\tSalut.\nbad\n")
    assert [s.value for s in at.success] == ["2 usable pairs, 1 skipped line."]


def test_an_upload_with_nothing_to_validate_on_is_named_before_launch(jobs_env):
    """Issue 53, item 6: a 2-pair upload launched a 10-minute run with 0 validation pairs."""
    at = uploaded(b"Go.\tVa !\nHi.\tSalut.\n")
    assert_clean(at)
    (warning,) = [plain(w.value) for w in at.warning if "validation pairs" in w.value]
    assert "With 2 usable pairs" in warning and "0 validation pairs" in warning
    assert "best.pt is simply the latest checkpoint" in warning
    many = "".join(f"I am {i}.\tJe suis {i}.\n" for i in range(200)).encode()
    at.file_uploader(key="data_upload").set_value(("many.tsv", many, "text/plain")).run()
    assert not [w for w in at.warning if "validation pairs" in w.value]  # 200 x 2 %: 4


def test_validation_pairs_are_counted_before_reading_the_corpus():
    from core.corpus.config import DataConfig
    from core.corpus.splits import validation_pairs_at_most

    assert validation_pairs_at_most(2, DataConfig()) == 0
    assert validation_pairs_at_most(200, DataConfig(val_fraction=0.02)) == 4
    head = DataConfig(split="head", num_train=512, num_val=128)
    assert validation_pairs_at_most(600, head) == 88
    assert validation_pairs_at_most(500, head) == 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"Go.\tVa !\n\xff\xfe bad bytes\n", "mes paires.txt is not UTF-8"),
        (b"no tab here\n", "mes paires.txt has no usable sentence pairs"),
        (b"no tab here\n", "(1 malformed line skipped)"),
    ],
)
def test_upload_errors_name_the_users_file(jobs_env, data, reason):
    at = train_page()
    at.radio(key="data_source").set_value("upload").run()
    at.file_uploader(key="data_upload").set_value(("mes paires.txt", data, "text/plain")).run()
    errors = [plain(e.value) for e in at.error]
    assert len(errors) == 1 and reason in errors[0], errors
    assert ".uploads" not in errors[0]


def test_preset_fills_the_advanced_form(jobs_env):
    at = train_page()
    at.radio(key="preset").set_value("d2l").run()
    got = {
        k: at.number_input(key=f"d2l.{k}").value
        for k in (
            "data.num_train",
            "data.num_val",
            "model.d_model",
            "model.d_ff",
            "model.dropout",
            "train.lr",
            "train.epochs",
            "train.batch_size",
        )
    }
    assert got == {
        "data.num_train": 512,
        "data.num_val": 128,
        "model.d_model": 256,
        "model.d_ff": 64,
        "model.dropout": 0.2,
        "train.lr": 0.0015,
        "train.epochs": 30,
        "train.batch_size": 128,
    }


def test_each_preset_keeps_its_own_form_values(jobs_env):
    """Switching presets never mixes their values; submitted edits stay with their preset."""
    at = train_page()
    at.radio(key="data_source").set_value("file path").run()  # no data: Launch starts nothing
    at.number_input(key="small.train.log_every").set_value(7)
    button(at, "Launch training").click().run()  # a form commits its values on submit
    assert any("Choose usable data first" in e.value for e in at.error)
    at.radio(key="preset").set_value("d2l").run()
    assert at.number_input(key="d2l.train.log_every").value == 1
    assert at.number_input(key="d2l.train.eval_every").value == 20
    at.radio(key="preset").set_value("small").run()
    assert at.number_input(key="small.train.log_every").value == 7


def test_every_form_widget_carries_its_value_itself(jobs_env):
    """A browser that missed a rerun shows a widget's own default: it must be the value.

    (With the value only in session_state, the widget's default was 0 / unchecked / empty,
    and a quick click after a preset switch launched with those.)
    """
    at = train_page()
    for preset in ("d2l", "small", "induction"):
        at.radio(key="preset").set_value(preset).run()
        by_key = {w.key: w for w in widgets_of(at)}
        defaults = settings.defaults(preset)
        for f in settings.form_fields():
            if not settings.field_applies(
                f.name, defaults["data"]["task"], defaults["model"]["arch"]
            ):
                assert f"{preset}.{f.group}.{f.name}" not in by_key  # hidden for that task
                continue
            value = defaults[f.group][f.name]
            widget = by_key[f"{preset}.{f.group}.{f.name}"]
            shown = widget.proto.default
            if f.value_type == "choice":
                shown = widget.options[shown]
            elif f.value_type == "list":
                value = "\n".join(value)
            assert shown == value, (f.name, shown, value)


def widgets_of(at: AppTest) -> list:
    """The form's widgets of every type."""
    return [*at.number_input, *at.checkbox, *at.selectbox, *at.text_area]


# ----------------------------------------------------------------------------- runs


def test_run_list_shows_every_state(jobs_env, make_run, dead_pid):
    root = runs_root()
    make_run(root, "a-finished", {"state": "finished"}, job={"created_at": 1})
    make_run(root, "b-stopped", {"state": "stopped"}, job={"created_at": 2}, checkpoint=True)
    make_run(root, "c-failed", {"state": "failed", "message": "boom"}, job={"created_at": 3})
    make_run(root, "d-died", {"state": "running", "pid": dead_pid()}, job={"created_at": 4})
    live = make_run(root, "e-running", {"state": "running"}, job={"created_at": 5})
    sleeper = fake_trainer(live.path)
    try:
        live.write_status(pid=sleeper.pid)
        at = train_page("d-died")
        table = next(d.value for d in at.dataframe if "state" in d.value.columns)
        assert dict(zip(table["run"], table["state"])) == {
            "e-running": "running",
            "d-died": "failed",
            "c-failed": "failed",
            "b-stopped": "stopped",
            "a-finished": "finished",
        }
        assert badges(at) == [":red-badge[failed]"]  # the run in the URL is shown
        assert any("ended unexpectedly" in e.value for e in at.error)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_all_runs_table_refreshes_itself_while_a_run_is_live(jobs_env, make_run, monkeypatch):
    """The table is a fragment polling every TABLE_POLL_S while a run is live, else still."""
    import streamlit as st

    from pages.ui.polling import TABLE_POLL_S

    polls = {}
    real_fragment = st.fragment

    def spy(func=None, *, run_every=None, **kw):
        polls[getattr(func, "__name__", "?")] = run_every
        return real_fragment(func, run_every=run_every, **kw)

    monkeypatch.setattr(st, "fragment", spy)
    make_run(runs_root(), "a-finished", {"state": "finished"}, job={"created_at": 1})
    train_page("a-finished")
    assert polls["_runs_table_now"] is None  # nothing live: no polling at all
    live = make_run(runs_root(), "b-running", {"state": "running"}, job={"created_at": 2})
    sleeper = fake_trainer(live.path)
    try:
        live.write_status(pid=sleeper.pid, progress=0.5)
        at = train_page("a-finished")  # another run is shown: the table alone follows the live one
        assert polls["_runs_table_now"] == TABLE_POLL_S
        table = next(d.value for d in at.dataframe if "state" in d.value.columns)
        assert dict(zip(table["run"], table["progress"]))["b-running"] == 0.5
    finally:
        sleeper.kill()
        sleeper.wait()


def test_run_id_from_the_url_is_shown_literally(jobs_env):
    """Markdown, links and directives in ?run= are escaped: the warning shows them as typed."""
    wanted = "**bold**[x](javascript:alert(1)) :red[y] $z$ <b>"
    at = train_page(wanted)
    # (offline, the page also warns that fra-eng cannot be downloaded: not this test's subject)
    (warning,) = [w.value for w in at.warning if "any more (deleted" in plain(w.value)]
    escaped = r"\*\*bold\*\*\[x\]\(javascript\:alert\(1\)\) \:red\[y\] \$z\$ \<b\>"
    assert f"Run '{escaped}' is not on this server" in warning
    assert plain(warning) == f"Run '{wanted}' is not on this server any more (deleted or renamed?)."


def test_a_link_to_a_deleted_run_shows_no_run_to_stop_or_delete(jobs_env, make_run):
    """Issue 53, item 4: a stale ?run= fell back to the newest run with live Stop and Delete
    buttons; repeating a delete flow removed a different run."""
    make_run(runs_root(), "other", {"state": "finished"}, checkpoint=True)
    at = train_page("deleted-one")
    assert_clean(at)
    assert any("is not on this server any more" in plain(w.value) for w in at.warning)
    labels = [b.label for b in at.button]
    assert "Delete run…" not in labels and "Stop" not in labels and "Resume" not in labels
    (runs,) = [s for s in at.selectbox if s.label == "Run"]
    assert runs.value is None  # nothing picked for the user
    runs.select("other").run()
    assert "Delete run…" in [b.label for b in at.button]  # once picked, as usual


def test_resume_and_delete_with_confirmation(jobs_env, make_run):
    make_run(runs_root(), "old", {"state": "finished"}, checkpoint=True)
    at = train_page("old")
    assert "Resume" not in [b.label for b in at.button]  # finished runs are not resumed
    button(at, "Delete run…").click().run()
    assert any("for good" in w.value for w in at.warning)
    assert (runs_root() / "old").is_dir()  # not yet
    assert button(at, "Yes, delete it").proto.type != "primary"  # unlike Launch's blue
    button(at, "Yes, delete it").click().run()
    assert not (runs_root() / "old").exists()
    assert "run" not in at.query_params


def test_promote_form_validates_the_name(jobs_env, make_run):
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    at = train_page("done")
    name = next(t for t in at.text_input if t.label == "Model name")
    name.set_value("../escape")
    button(at, "Save model").click().run()
    assert any("not a valid model name" in e.value for e in at.error)
    name = next(t for t in at.text_input if t.label == "Model name")
    name.set_value("fr-good")
    button(at, "Save model").click().run()
    assert (checkpoints_root() / "fr-good.pt").is_file()


def test_launch_shows_live_metrics_and_stops(jobs_env):
    at = train_page()
    fill_tiny_form(at)
    button(at, "Launch training").click().run()
    assert not at.error, [e.value for e in at.error]
    run_id = at.query_params["run"]
    rd = RunDir(runs_root() / run_id)
    info = run_status.run_info(run_id)
    assert rd.path.is_dir() and info.alive and check_trainer(info.pid, rd.path, info.identity)

    wait_for(lambda: tick(at) and len(loss_points(at)) >= 3, what="3 points of the loss curve")
    logged = [r["step"] for r in rd.read_metrics() if r["record"] == "train"]
    assert len(loss_points(at)) >= 3 and set(loss_points(at)) <= set(logged)
    assert badges(at) == [":blue-badge[running]"]

    button(at, "Stop").click().run()
    wait_for(lambda: tick(at) and badges(at) == [":orange-badge[stopped]"], 60, "the stop")
    assert rd.last.is_file() and not run_status.run_info(run_id).alive
    assert "Resume" in [b.label for b in at.button]


def test_a_run_that_failed_before_logging_draws_no_charts(jobs_env, make_run):
    """A run that failed to start (its data not downloadable) drew six empty charts ("no
    data yet") and a "Pause updates" toggle under its error; its error and log suffice."""
    message = "fra-eng.zip could not be downloaded: no network"
    rd = make_run(runs_root(), "no-data", {"state": "failed", "message": message})
    rd.log.write_text("download failed\n")
    at = train_page("no-data")
    assert any("could not be downloaded" in plain(e.value) for e in at.error)
    assert not at.get("plotly_chart")
    assert "Pause updates" not in [t.label for t in at.toggle]
    (log,) = [x for x in at.expander if x.label == "Log (last lines)"]
    assert "download failed" in log.code[0].value


def test_a_diverged_run_says_so(jobs_env, make_run):
    message = "Training diverged at step 7: the loss became NaN. The last finite checkpoint"
    make_run(runs_root(), "nan-run", {"state": "diverged", "message": message}, checkpoint=True)
    at = train_page("nan-run")
    assert badges(at) == [":red-badge[diverged]"]
    assert any("Training diverged at step 7" in plain(e.value) for e in at.error)
    assert "Resume" in [b.label for b in at.button]  # from the last finite checkpoint


@pytest.mark.parametrize(
    ("preset", "data", "warned"),
    [
        ("d2l", {"split": "head", "num_train": 512, "num_val": 128}, True),
        ("small", {"split": "head", "num_train": 300, "num_val": 20}, True),
        ("small", {"split": "random", "max_pairs": 900}, True),
        ("small", {"split": "random"}, False),
    ],
)
def test_a_run_on_few_pairs_says_why_its_bleu_is_low(jobs_env, make_run, preset, data, warned):
    status = {"state": "finished", "step": 120, "best_bleu": 5.1}
    job = {"preset": preset, "settings": {"data": data, "model": {}, "train": {}}}
    make_run(runs_root(), "few", status, job)
    at = train_page("few")
    notes = [plain(m.value) for m in [*at.info, *at.caption] if "generalise" in m.value]
    assert bool(notes) == warned, notes
    if warned:
        assert "pairs" in notes[0] and "<unk>" in notes[0]


def test_runs_are_told_apart_named_and_compared_from_the_url(jobs_env, make_run):
    root = runs_root()
    model = {"d_model": 8, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1}
    for run_id, heads in (("a-run", 2), ("b-run", 4)):
        rd = make_run(root, run_id, {"state": "finished"}, job={"preset": "d2l"})
        rd.write_config({"data": {"source": "fra-eng"}, "model": {**model, "num_heads": heads}})
        rd.append_metrics({"record": "train", "step": 1, "loss": 2.0})
    jobs.rename_run("b-run", "wide heads")
    at = run_app()
    at.query_params.update({"run": "a-run", "compare": "b-run"})
    at.switch_page("pages/train.py").run()
    assert at.multiselect(key="compare").value == ["b-run"]
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in spec["data"] if t.get("showlegend", True) is not False] == [
        "a-run · d2l · 2 heads · fra-eng (Tatoeba)",
        "wide heads · d2l · 4 heads · fra-eng (Tatoeba)",
    ]
    assert spec["layout"]["showlegend"] is False  # one shared key above the six charts instead
    (key,) = [h.proto.body for h in at.get("html")]
    assert "a-run · d2l · 2 heads" in key and "wide heads · d2l · 4 heads" in key
    at.multiselect(key="compare").set_value([]).run()
    assert "compare" not in at.query_params


def test_the_preset_choice_survives_a_reload(jobs_env):
    at = train_page()
    at.radio(key="preset").set_value("d2l").run()
    assert at.query_params["preset"] == "d2l"
    reloaded = run_app()  # a new session, as after a reload, with the same URL
    reloaded.query_params["preset"] = "d2l"
    reloaded.switch_page("pages/train.py").run()
    assert reloaded.radio(key="preset").value == "d2l"


def test_a_starting_run_says_what_it_is_doing(jobs_env, make_run):
    rd = make_run(runs_root(), "early", {"state": "starting"})
    sleeper = fake_trainer(rd.path)
    try:
        message = "reading the corpus and building the vocabularies"
        rd.write_status(pid=sleeper.pid, message=message)
        at = train_page("early")
        progress = at.get("progress")[0].proto.text
        assert message in plain(progress) and "since launch" in progress
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_diverged_run_resumes_with_a_lower_learning_rate(jobs_env, make_run, monkeypatch):
    rd = make_run(runs_root(), "nan-lr", {"state": "diverged", "message": "x"}, checkpoint=True)
    rd.write_config({"data": {}, "model": {}, "train": {"lr": 0.01}})
    asked = {}
    monkeypatch.setattr(
        jobs,
        "resume_run",
        lambda run_id, limits=None, processes=None, user=None: asked.update(limits),
    )
    at = train_page("nan-lr")
    assert at.number_input(key="resume_lr_nan-lr").value == 0.005
    at.number_input(key="resume_lr_nan-lr").set_value(0.001)
    next(b for b in at.button if b.label == "Resume").click().run()
    assert asked == {"lr": 0.001}


def test_a_run_resumes_with_another_number_of_processes(jobs_env, make_run, monkeypatch):
    job = {"processes": 2, "device_type": "cpu"}
    make_run(runs_root(), "two", {"state": "stopped"}, job=job, checkpoint=True)
    make_run(runs_root(), "alone", {"state": "stopped"}, checkpoint=True)
    asked = []
    monkeypatch.setattr(capacity, "max_processes", lambda device_type: 4)
    monkeypatch.setattr(
        jobs,
        "resume_run",
        lambda run_id, limits=None, processes=None, user=None: asked.append(processes),
    )
    at = train_page("two")
    box = at.number_input(key="resume_processes_two")
    assert box.value == 2  # as many as its last launch, by default
    box.set_value(1).run()
    next(b for b in at.button if b.label == "Resume").click().run()
    assert asked == [1]
    at = train_page("alone")
    assert at.number_input(key="resume_processes_alone").value == 1
    monkeypatch.setattr(capacity, "max_processes", lambda device_type: 1)
    at = train_page("alone")
    assert not [n for n in at.number_input if n.key == "resume_processes_alone"]


@pytest.mark.parametrize("processes", [0, -3, 99])
def test_resume_refuses_an_impossible_number_of_processes_with_the_reason(
    jobs_env, make_run, monkeypatch, processes
):
    job = {"processes": 2, "device_type": "cpu"}
    make_run(runs_root(), "two", {"state": "stopped"}, job=job, checkpoint=True)
    monkeypatch.setattr(capacity, "max_processes", lambda device_type: 4)
    at = train_page("two")
    at.number_input(key="resume_processes_two").set_value(processes).run()
    next(b for b in at.button if b.label == "Resume").click().run()
    assert [e.value for e in at.error if "process" in e.value.lower()], [e.value for e in at.error]


def test_the_advanced_settings_are_labelled_in_words_and_laid_out_in_columns(jobs_env):
    """Issue 53, item 8: about 40 raw snake_case fields in one column."""
    at = train_page()
    advanced = next(x for x in at.expander if x.label.startswith("Advanced"))
    inputs = [*advanced.number_input, *advanced.selectbox, *advanced.checkbox]
    assert len(inputs) > 20 and not [w.label for w in inputs if "_" in w.label]
    smoothing = next(w for w in advanced.number_input if w.label == "label smoothing")
    assert "--label-smoothing" in smoothing.help and "train.label_smoothing" in smoothing.help
    assert len(advanced.columns) >= 3 * 3  # three groups, three fields to a row


def test_the_fra_eng_copy_is_named_without_a_server_path(jobs_env, tmp_path, monkeypatch):
    """Seen on a screenshot: "using the copy at /work/shared/data/fra-eng.zip" to every visitor."""
    copy = tmp_path / "elsewhere" / "fra-eng.zip"
    copy.parent.mkdir()
    copy.write_bytes(b"PK")
    monkeypatch.setenv("FRA_ENG_ZIP", str(copy))
    at = train_page()
    (line,) = [c.value for c in at.caption if "using the copy at" in c.value]
    assert "fra-eng.zip" in line and str(tmp_path) not in line
