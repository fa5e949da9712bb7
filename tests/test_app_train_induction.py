"""AppTest of the Train page's "Task" and "Architecture" choices (issue 66): a decoder-only
model on the induction task in one or two clicks, the fields shown those that task reads."""

from __future__ import annotations

import json

import pytest

from core.places import DATA_ENV, data_root, runs_root
from core.runs import jobs
from core.training import settings
from core.training.circuits import phase_change
from tests.helpers import assert_clean, fra_eng_like, plain
from tests.test_app_train import button, train_page


@pytest.fixture
def launched(jobs_env, make_run, monkeypatch, tmp_path) -> list[tuple[str, dict]]:
    """(preset, settings) of each launch the page asks for (no trainer starts; a copy of
    fra-eng here, so that Launch is on for it offline)."""
    monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))
    asked = []

    def start_run(preset, chosen, processes, user=None, alignment=None):
        asked.append((preset, chosen))
        make_run(runs_root(), "watched", {}, job={"preset": preset})
        return "watched"

    monkeypatch.setattr(jobs, "start_run", start_run)
    return asked


def keys_of(at, widget: str) -> set[str]:
    """The keys of the page's widgets of one type ("number_input", "selectbox", ...)."""
    return {w.key for w in getattr(at, widget)}


def test_the_induction_preset_launches_a_decoder_only_model_on_the_induction_task(launched):
    at = train_page()
    at.radio(key="preset").set_value("induction").run()
    assert_clean(at)
    assert at.selectbox(key="induction.data.task").value == "induction"
    assert at.selectbox(key="induction.model.arch").value == "decoder-only"
    assert "data_source" not in keys_of(at, "radio")  # the task makes its own sequences
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    ((preset, chosen),) = launched
    assert preset == "induction"
    assert chosen["data"]["task"] == "induction" and chosen["model"]["arch"] == "decoder-only"
    assert chosen["data"]["induction_length"] == 16 and chosen["model"]["d_model"] == 64
    assert at.query_params["run"] == "watched"


def test_choosing_task_and_architecture_shows_the_fields_they_read_and_writes_them(launched):
    """From the "small" preset: the translation corpus's fields give way to the induction
    task's, the encoder's to grouped-query attention's; the request carries both choices."""
    at = train_page()
    at.radio(key="preset").set_value("small").run()
    numbers = keys_of(at, "number_input")
    assert "small.data.max_len" in numbers and "small.data.induction_length" not in numbers
    assert "small.model.num_encoder_layers" in numbers and "data_source" in keys_of(at, "radio")
    at.selectbox(key="small.data.task").set_value("induction").run()
    at.selectbox(key="small.model.arch").set_value("decoder-only").run()
    assert_clean(at)
    numbers = keys_of(at, "number_input")
    assert {"small.data.induction_length", "small.data.induction_tokens"} <= numbers
    assert "small.data.max_len" not in numbers and "small.data.tokenizer" not in keys_of(
        at, "selectbox"
    )
    assert "small.model.num_kv_heads" in numbers
    assert "small.model.num_encoder_layers" not in numbers
    assert "data_source" not in keys_of(at, "radio")
    at.number_input(key="small.data.induction_length").set_value(8)
    at.number_input(key="small.model.num_kv_heads").set_value(2)
    at.number_input(key="small.train.time_budget").set_value(60.0)
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    ((preset, chosen),) = launched
    assert preset == "small"
    assert chosen["data"]["task"] == "induction" and chosen["model"]["arch"] == "decoder-only"
    assert chosen["data"]["induction_length"] == 8 and chosen["model"]["num_kv_heads"] == 2
    assert chosen["data"]["max_len"] == 12  # hidden: the preset's value, untouched


def test_the_lm_task_reads_the_corpus_the_form_names(launched, tmp_path, monkeypatch):
    """The lm task reads its corpus's text (packed): the form hid the Data choice for it as for
    induction, and every lm run from the page trained on fra-eng."""
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    data_root().mkdir(parents=True, exist_ok=True)
    (data_root() / "mine.tsv").write_text("Go.\tVa !\nHi.\tSalut.\n", encoding="utf-8")
    at = train_page()
    at.selectbox(key="small.data.task").set_value("lm").run()
    at.selectbox(key="small.model.arch").set_value("decoder-only").run()
    assert_clean(at)
    assert "data_source" in keys_of(at, "radio")
    at.radio(key="data_source").set_value("file path").run()
    at.text_input(key="data_path").set_value("mine.tsv").run()
    button(at, "Launch training").click().run()
    assert_clean(at)
    ((_, chosen),) = launched
    assert chosen["data"]["task"] == "lm" and chosen["data"]["source"].endswith("mine.tsv")


def watched_induction_run(make_run):
    """(a finished induction run "induction-run" whose evaluations carry circuit scores, its
    records: ``tests.test_circuit_watch.records``)."""
    from tests.test_circuit_watch import records

    recs = records()
    rd = make_run(runs_root(), "induction-run", {"state": "finished", "step": 200})
    preset = settings.defaults("induction")
    rd.write_config({"data": preset["data"], "model": preset["model"]})
    for record in recs:
        rd.append_metrics(record)
    return rd, recs


def test_a_watched_induction_run_shows_its_heads_forming_and_the_phase_change(jobs_env, make_run):
    """A run whose evaluations carry circuit scores: its page draws every head's scores over
    training and the repeat's loss, the phase change shaded there and on the loss curves."""
    _, recs = watched_induction_run(make_run)
    at = train_page("induction-run")
    header = " ".join(plain(c.value) for c in at.caption)
    assert "induction: 4-16 random tokens read twice (256 kinds)" in header
    (line,) = [plain(c.value) for c in at.caption if "random tokens read twice" in c.value]
    assert "2 blocks, decoder-only" in line and "fra-eng" not in line  # the run's own line
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    by_title = {s["layout"]["title"]["text"]: s for s in specs}
    phase = phase_change(recs)
    shaded = [[phase["start"], phase["end"]]]
    for title in (
        "induction score per head",
        "previous-token score per head",
        "duplicate-token score per head",
        "loss on the random tokens",
        "training loss (as trained)",
        "validation loss (cross-entropy)",
    ):
        rects = [[s["x0"], s["x1"]] for s in by_title[title]["layout"].get("shapes", [])]
        assert rects == shaded, title
    assert len(by_title["induction score per head"]["data"]) == 8
    assert "validation BLEU" not in by_title  # it translates nothing
    assert any("Circuits forming" in m.value for m in at.markdown)
    (words,) = [plain(c.value) for c in at.caption if "Phase change between" in c.value]
    assert "layer 1 head 2" in words


def test_a_translation_run_shows_no_circuits(jobs_env, make_run):
    rd = make_run(runs_root(), "translation-run", {"state": "finished", "step": 20})
    rd.append_metrics({"record": "eval", "step": 20, "val_loss": 3.0, "val_bleu": 1.0})
    at = train_page("translation-run")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "validation loss (cross-entropy)" in titles and "validation BLEU" in titles
    assert not any("score per head" in t for t in titles)
    assert not any("Circuits forming" in m.value for m in at.markdown)
