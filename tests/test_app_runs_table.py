"""AppTest of the runs table: columns, search and filters, notes and tags, chart, config diff."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from core.places import runs_root
from core.runs.notes import MAX_TAG_CHARS, read_notes, write_notes
from core.runs.table import CORE_COLUMNS, HOME_COLUMNS
from tests.helpers import assert_clean, plain, run_app
from tests.test_runs_table import make_trained_run


def train_page(query: dict | None = None) -> AppTest:
    """The Train page with ``query`` in the URL, run once."""
    at = run_app()
    at.query_params.update(query or {})
    at.switch_page("pages/train.py").run()
    assert_clean(at)
    return at


def runs_table(at: AppTest):
    """The All runs table's data (the dataframe with a progress column), or None when hidden."""
    found = [d.value for d in at.dataframe if "progress" in d.value.columns]
    return found[0] if found else None


def three_runs(make_run) -> None:
    """alpha (baseline, lr 1e-3), beta (lr 5e-4, tagged sweep) and a failed gamma."""
    make_trained_run(make_run, "alpha", created=1, bleus=(3.0, 6.0))
    make_trained_run(make_run, "beta", created=2, lr=5e-4, bleus=(2.0, 4.0))
    make_run(runs_root(), "gamma", {"state": "failed"}, {"created_at": 3, "name": "wide"})
    write_notes("alpha", "The **baseline**", "baseline, sweep")
    write_notes("beta", "", "sweep")


def test_the_table_shows_core_columns_and_more_on_request(jobs_env, make_run):
    three_runs(make_run)
    at = train_page({"run": "alpha"})
    table = runs_table(at)
    assert list(table.columns) == list(CORE_COLUMNS)
    assert list(table["run"]) == ["gamma", "beta", "alpha"]
    alpha = table.set_index("run").loc["alpha"]
    assert (alpha["final BLEU"], alpha["best BLEU"], alpha["final loss"]) == (6.0, 6.0, 3.0)
    assert list(alpha["tags"]) == ["baseline", "sweep"] and alpha["note"] == "The **baseline**"
    at.multiselect(key="runs_more_columns").set_value(["train.lr", "model.num_heads"]).run()
    table = runs_table(at)
    # added columns come after the run and its name, in view, not past the right edge
    assert list(table.columns[:4]) == ["run", "name", "train.lr", "model.num_heads"]
    assert list(table.columns[4:]) == list(CORE_COLUMNS[2:])
    assert dict(zip(table["run"], table["train.lr"]))["beta"] == 5e-4
    # Home shows a summary of them that fits its page (the core columns were cut at 1400 px)
    home = run_app()
    assert list(home.dataframe[-1].value.columns) == list(HOME_COLUMNS)
    assert set(HOME_COLUMNS) < set(CORE_COLUMNS)


def test_search_state_and_tag_filters(jobs_env, make_run):
    three_runs(make_run)
    at = train_page({"run": "alpha"})
    at.text_input(key="runs_search").set_value("BASELINE").run()
    assert list(runs_table(at)["run"]) == ["alpha"]
    assert any("1 of 3 runs match" in c.value for c in at.caption)
    at.text_input(key="runs_search").set_value("").run()
    at.multiselect(key="runs_states").set_value(["failed"]).run()
    assert list(runs_table(at)["run"]) == ["gamma"]
    at.multiselect(key="runs_states").set_value([]).run()
    assert at.multiselect(key="runs_tags").options == ["baseline", "sweep"]
    at.multiselect(key="runs_tags").set_value(["sweep"]).run()
    assert list(runs_table(at)["run"]) == ["beta", "alpha"]
    at.text_input(key="runs_search").set_value("nothing like it").run()
    assert runs_table(at) is None and any("0 of 3 runs" in c.value for c in at.caption)
    assert_clean(at)


def test_notes_and_tags_are_edited_and_kept_in_the_run(jobs_env, make_run):
    three_runs(make_run)
    at = train_page({"run": "beta"})
    note = next(t for t in at.text_area if t.label == "Note")
    note.set_value("[click](javascript:alert(1)) <b>lr</b> halved")
    next(t for t in at.text_input if t.label == "Tags of this run").set_value("sweep, half lr")
    next(b for b in at.button if b.label == "Save notes").click().run()
    assert_clean(at)
    saved = read_notes(runs_root() / "beta")
    assert saved.note == "[click](javascript:alert(1)) <b>lr</b> halved"
    assert saved.tags == ["sweep", "half lr"]
    row = runs_table(at).set_index("run").loc["beta"]
    assert row["note"] == saved.note and list(row["tags"]) == saved.tags
    assert "half lr" in at.multiselect(key="runs_tags").options
    # a tag too long is refused with the reason; the user's text is shown literally
    long_tag = "**" + "x" * MAX_TAG_CHARS
    next(t for t in at.text_input if t.label == "Tags of this run").set_value(long_tag)
    next(b for b in at.button if b.label == "Save notes").click().run()
    (error,) = [e.value for e in at.error]
    assert "A tag has at most" in plain(error) and "\\*\\*xx" in error
    assert read_notes(runs_root() / "beta").tags == ["sweep", "half lr"]  # unchanged


def test_the_settings_chart_draws_the_runs_with_a_bleu(jobs_env, make_run):
    three_runs(make_run)
    at = train_page({"run": "alpha"})
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [s for s in specs if s["data"] and s["data"][0]["type"] == "parcoords"]
    dims = [d["label"] for d in chart["data"][0]["dimensions"]]
    assert dims == ["train.lr", "final loss", "val loss", "final BLEU"]  # lr is what differs
    assert "2 runs" in chart["layout"]["title"]["text"]
    at.multiselect(key="runs_states").set_value(["failed"]).run()
    assert any("Two runs with a validation BLEU" in c.value for c in at.caption)


def test_comparing_runs_shows_the_settings_that_differ(jobs_env, make_run):
    three_runs(make_run)
    at = train_page({"run": "alpha"})
    assert not any("Settings that differ" in m.value for m in at.markdown)
    at = train_page({"run": "alpha", "compare": "beta"})
    assert any("Settings that differ" in m.value for m in at.markdown)
    diff = next(d.value for d in at.dataframe if "setting" in d.value.columns)
    assert list(diff.columns) == ["setting", "alpha", "beta"]
    assert diff.to_dict("records") == [{"setting": "train.lr", "alpha": "0.001", "beta": "0.0005"}]
