"""AppTest tests of the app (app.py) and its Home page."""

from __future__ import annotations

import json
from pathlib import Path

from core.places import checkpoints_root, runs_root
from core.runs import catalogue as models
from core.runs.cpu_share import default_threads
from core.runs.promotion import promote
from core.runs.table import HOME_COLUMNS
from core.training.devices import device_summary
from tests.helpers import assert_clean, run_app


def test_home_describes_the_app_and_lists_models_and_runs(jobs_env, make_run):
    rd = make_run(runs_root(), "20260101-000000-d2l", {"state": "finished"}, checkpoint=True)
    rd.append_metrics({"record": "eval", "step": 10, "val_loss": 3.25})
    promote("20260101-000000-d2l", "best", "fr-demo")
    (checkpoints_root() / "broken.pt").write_bytes(b"junk")
    at = run_app()
    assert_clean(at)
    assert at.title[0].value == "Attention Studio"
    text = " ".join(m.value for m in at.markdown)
    # the page's words for what a new trainer starts with, whatever this worker's own count
    assert "Training device:" in text and device_summary(default_threads()) in text
    assert any("Tatoeba" in c.value and "CC-BY 2.0" in c.value for c in at.caption)
    links = [Path(p.proto.page).stem for p in at.get("page_link")]
    assert links == ["train", "translate", "attention"]
    table, runs = (d.value for d in at.dataframe)
    # the one catalogue (core.runs.catalogue, tested in test_catalogue.py) is what Home lists
    expected = models.models_frame(models.list_models())
    assert table.fillna(-1).equals(expected.fillna(-1))
    assert len(table) == 4 and table["val BLEU"].max() == 12.5
    assert list(runs["run"]) == ["train?run=20260101-000000-d2l"]  # a link to the run
    assert list(runs["state"]) == ["finished"]
    assert list(runs.columns) == list(HOME_COLUMNS)  # a summary that fits: "All runs" has all
    assert list(runs["val loss"]) == [3.25]  # what a run without BLEU (lm, masked-LM, induction)
    # is judged by: Home showed those runs as "best BLEU —" and nothing else
    link = json.loads(at.dataframe[1].proto.columns)["run"]  # shown as the run id
    assert link["type_config"]["type"] == "link" and "run=" in link["type_config"]["display_text"]
    # a model without a BLEU (the broken file) shows a dash, never the word "None"
    assert table["val BLEU"].isna().any()
    assert [d.proto.placeholder for d in at.dataframe] == ["—", "—"]


def test_run_names_show_in_the_runs_tables(jobs_env, make_run):
    make_run(runs_root(), "20260101-000000-d2l", {"state": "finished"}, {"name": "my first"})
    make_run(runs_root(), "20260102-000000-d2l", {"state": "finished"})
    at = run_app()
    runs = at.dataframe[-1].value
    assert list(runs.columns[:2]) == ["run", "name"]
    assert dict(zip(runs["run"], runs["name"])) == {
        "train?run=20260101-000000-d2l": "my first",  # Home links each run to its page
        "train?run=20260102-000000-d2l": "",
    }
    at.switch_page("pages/train.py").run()
    assert_clean(at)
    table = next(d.value for d in at.dataframe if "name" in d.value.columns)
    assert "my first" in list(table["name"])


HOME_PX_AT_1280 = 810  # Home's column is 820 px wide in a 1280 px window (sidebar open)


def test_the_models_table_fits_home_at_1280_px(jobs_env, make_run):
    """At 1280 px the Models table was cut at the right (the browser layout check's "table
    cut": its size column ended "· rope", "(2 ke…"): every column now has a width, and
    together they fit Home's column at that window width, with a "problem" column too."""
    make_run(runs_root(), "20260101-000000-d2l", {"state": "finished"}, checkpoint=True)
    promote("20260101-000000-d2l", "best", "fr-demo")
    (checkpoints_root() / "broken.pt").write_bytes(b"junk")  # it adds the "problem" column
    at = run_app()
    assert_clean(at)
    (table,) = [d for d in at.dataframe if "model" in d.value.columns]
    assert "problem" in table.value.columns, list(table.value.columns)
    config = json.loads(table.proto.columns)
    widths = [config.get(c, {}).get("width") for c in table.value.columns]
    assert all(isinstance(w, int) for w in widths), dict(zip(table.value.columns, widths))
    assert sum(widths) <= HOME_PX_AT_1280
    assert config["val BLEU"]["type_config"]["format"] == "%.2f"
