"""The runs table's library: notes and tags, rows, filters, config diff, parcoords, command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.figures.runs import chart_rows, runs_parcoords, varying_settings
from core.places import runs_root
from core.runs import notes as run_notes
from core.runs.config_diff import config_diff, diff_frame, run_columns
from core.runs.notes import NotesError, RunNotes, parse_tags, read_notes, write_notes
from core.runs.run_dir import RunDir, RunError
from core.runs.status import list_runs, run_info
from core.runs.table import (
    CORE_COLUMNS,
    all_tags,
    column_help,
    filter_rows,
    final_metrics,
    more_columns,
    run_rows,
    run_settings,
    runs_frame,
    setting_names,
)
from tests.helpers import ROOT

MODEL = {"d_model": 8, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1}


def make_trained_run(make_run, run_id, *, lr=1e-3, heads=2, bleus=(3.0, 5.0), created=1.0):
    """A finished run by hand: configs, two train and len(bleus) eval records."""
    rd = make_run(runs_root(), run_id, {"state": "finished", "step": 40}, {"created_at": created})
    rd.write_config(
        {
            "data": {"source": "fra-eng", "max_len": 10, "tokenizer": "word"},
            "model": {**MODEL, "num_heads": heads},
            "train": {"lr": lr, "schedule": "constant", "probes": ["Go ."]},
        }
    )
    rd.append_metrics({"record": "train", "step": 20, "loss": 4.0, "tokens_per_s": 100.0,
                       "elapsed": 10.0})  # fmt: skip
    rd.append_metrics({"record": "train", "step": 40, "loss": 3.0, "tokens_per_s": 50.0,
                       "elapsed": 30.0})  # fmt: skip
    for i, bleu in enumerate(bleus):
        rd.append_metrics({"record": "eval", "step": 20 * (i + 1), "val_bleu": bleu,
                           "val_loss": 3.5 - i})  # fmt: skip
    return rd


# ----------------------------------------------------------------------------- notes


@pytest.mark.parametrize(
    ("given", "tags"),
    [
        ("baseline, 8 heads", ["baseline", "8 heads"]),
        ("  a ,, A,  b  c ", ["a", "b c"]),  # trimmed, spaces collapsed, duplicates (any case)
        (["x", "y,z", "\x00x\x07"], ["x", "y", "z"]),  # commas split list items too
        ("", []),
    ],
)
def test_tags_are_parsed_into_clean_labels(given, tags):
    assert parse_tags(given) == tags


@pytest.mark.parametrize(
    ("note", "tags", "reason"),
    [
        ("n" * (run_notes.MAX_NOTE_CHARS + 1), "", "A note has at most"),
        ("", "t" * (run_notes.MAX_TAG_CHARS + 1), "A tag has at most"),
        ("", ",".join(f"t{i}" for i in range(run_notes.MAX_TAGS + 1)), "at most 12 tags"),
    ],
)
def test_notes_out_of_bounds_are_refused_and_nothing_is_written(jobs_env, make_run, note, tags,
                                                                 reason):  # fmt: skip
    rd = make_run(runs_root(), "r1", {"state": "finished"})
    with pytest.raises(NotesError, match=reason):
        write_notes("r1", note, tags)
    assert not rd.notes.exists()


def test_notes_round_trip_atomically_in_the_run_folder(jobs_env, make_run, monkeypatch):
    rd = make_run(runs_root(), "r1", {"state": "finished"})
    saved = write_notes("r1", "  *try* <b>bold</b>\n", "lr sweep, baseline")
    assert saved == RunNotes("*try* <b>bold</b>", ["lr sweep", "baseline"])
    assert read_notes(rd.path) == saved
    assert json.loads(rd.notes.read_text()) == {"note": saved.note, "tags": saved.tags}
    assert [p.name for p in rd.path.iterdir() if p.name.endswith(".tmp")] == []

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_notes.os, "replace", crash)
    with pytest.raises(RunError, match="No space left"):
        write_notes("r1", "new", "")
    assert read_notes(rd.path) == saved  # the old file stays whole
    assert [p.name for p in rd.path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"note": 5, "tags": "x"}',
        b" " * (run_notes.MAX_FILE_BYTES + 1),
    ],
)
def test_a_damaged_notes_file_reads_as_empty(tmp_path, content):
    (tmp_path / "notes.json").write_bytes(content)
    assert read_notes(tmp_path) == RunNotes()


def test_a_hand_edited_notes_file_is_cut_to_the_bounds(tmp_path):
    tags = [f"t{i}" for i in range(40)] + ["x" * 100]
    (tmp_path / "notes.json").write_text(json.dumps({"note": "n" * 9000, "tags": tags}))
    notes = read_notes(tmp_path)
    assert len(notes.note) == run_notes.MAX_NOTE_CHARS
    assert notes.tags == [f"t{i}" for i in range(run_notes.MAX_TAGS)]


def test_notes_of_a_missing_run_are_refused(jobs_env):
    with pytest.raises(RunError, match="does not exist"):
        write_notes("gone", "x", "")
    with pytest.raises(RunError, match="not a valid run id"):
        write_notes("../escape", "x", "")


# ----------------------------------------------------------------------------- rows


def test_a_row_holds_every_setting_and_the_final_metrics(jobs_env, make_run):
    rd = make_trained_run(make_run, "r1")
    write_notes("r1", "first try", "baseline")
    (row,) = run_rows(list_runs())
    assert set(CORE_COLUMNS) | set(more_columns()) <= set(row)
    assert {k: row[k] for k in ("run", "state", "tags", "note", "steps")} == {
        "run": "r1",
        "state": "finished",
        "tags": ["baseline"],
        "note": "first try",
        "steps": 40,
    }
    assert (row["final BLEU"], row["best BLEU"], row["final loss"], row["val loss"]) == (
        5.0,
        5.0,
        3.0,
        2.5,
    )
    assert row["tokens"] == 100 * 10 + 50 * 20  # tokens/s times each window's seconds
    assert row["elapsed (min)"] == 0.5
    assert row["train.lr"] == 1e-3 and row["model.num_heads"] == 2 and row["data.max_len"] == 10
    assert row["train.warmup_steps"] == 400  # left out of its config: the trainer's default
    assert "data.source" not in row and row["data"].startswith("fra-eng")  # no paths
    assert final_metrics(rd.path)["final BLEU"] == 5.0


def test_final_metrics_skip_missing_and_non_finite_values(tmp_path):
    rd = RunDir(tmp_path)
    assert final_metrics(tmp_path)["final BLEU"] is None  # no metrics file yet
    rd.append_metrics({"record": "train", "step": 1, "loss": float("nan"), "elapsed": 1.0})
    rd.append_metrics({"record": "eval", "step": 1, "val_bleu": -1.0, "val_loss": 0.0})
    got = final_metrics(tmp_path)
    assert got["final loss"] is None and got["final BLEU"] is None and got["val loss"] == 0.0


def test_every_setting_name_is_a_config_field_once():
    names = setting_names()
    assert len(names) == len(set(names)) and "train.lr" in names and "model.d_model" in names
    assert not {"data.source", "model.src_vocab_size", "model.pad_id"} & set(names)


def test_every_setting_and_result_column_says_what_it_means():
    helps = column_help()
    assert set(setting_names()) <= set(helps) and helps["train.lr"] == "peak learning rate of Adam"
    assert {"best BLEU", "final BLEU", "final loss", "val loss", "tokens"} <= set(helps)


def test_filters_search_states_and_tags(jobs_env, make_run):
    make_trained_run(make_run, "alpha", created=1)
    make_trained_run(make_run, "beta", created=2)
    make_run(runs_root(), "gamma", {"state": "failed"}, {"created_at": 3, "name": "Wide Heads"})
    write_notes("alpha", "The baseline", "sweep, lr")
    write_notes("beta", "", "sweep")
    rows = run_rows(list_runs())
    assert [r["run"] for r in rows] == ["gamma", "beta", "alpha"]
    pick = lambda **kw: [r["run"] for r in filter_rows(rows, **kw)]  # noqa: E731
    assert pick() == ["gamma", "beta", "alpha"]
    assert pick(search="BASELINE") == ["alpha"]  # the note, any case
    assert pick(search="wide") == ["gamma"]  # the name
    assert pick(search="lr") == ["alpha"]  # a tag
    assert pick(search="bet") == ["beta"]  # the id
    assert pick(states=["failed"]) == ["gamma"]
    assert pick(tags=["lr"]) == ["alpha"] and pick(tags=["sweep"]) == ["beta", "alpha"]
    assert pick(search="a", states=["finished"], tags=["lr"]) == ["alpha"]
    assert all_tags(rows) == ["lr", "sweep"]


def test_the_frame_keeps_known_columns_in_order(jobs_env, make_run):
    make_trained_run(make_run, "r1")
    rows = run_rows(list_runs())
    assert list(runs_frame(rows).columns) == list(CORE_COLUMNS)
    frame = runs_frame(rows, ["run", "train.lr", "not a column"])
    assert list(frame.columns) == ["run", "train.lr"] and frame["train.lr"][0] == 1e-3


# ----------------------------------------------------------------------------- config diff


def test_config_diff_lists_only_the_settings_that_differ(jobs_env, make_run):
    make_trained_run(make_run, "a", lr=1e-3, heads=2)
    make_trained_run(make_run, "b", lr=5e-4, heads=2)
    make_trained_run(make_run, "c", lr=1e-3, heads=4)
    runs = [run_info(r) for r in ("a", "b", "c")]
    rows = config_diff(runs, {"b": "half lr"})
    assert rows == [
        {"setting": "model.num_heads", "a": 2, "half lr": 2, "c": 4},
        {"setting": "train.lr", "a": 1e-3, "half lr": 5e-4, "c": 1e-3},
    ]
    assert config_diff(runs[:1]) == [] and config_diff([runs[0], runs[0]]) == []
    frame = diff_frame(rows)
    assert list(frame.columns) == ["setting", "a", "half lr", "c"]
    assert list(frame["half lr"]) == ["2", "0.0005"]


def test_a_setting_one_run_lacks_differs_and_shows_a_dash(jobs_env, make_run):
    make_trained_run(make_run, "a")
    rd = make_trained_run(make_run, "b")
    rd.write_config({"data": {"max_len": 10, "tokenizer": "word"}, "model": MODEL})  # no train
    rows = config_diff([run_info("a"), run_info("b")])
    lr = next(r for r in rows if r["setting"] == "train.lr")
    assert lr == {"setting": "train.lr", "a": 1e-3, "b": None}
    assert diff_frame([lr])["b"][0] == "—"


def test_run_columns_are_unique(jobs_env, make_run):
    for run_id in ("a", "b"):
        make_run(runs_root(), run_id, {"state": "finished"})
    runs = [run_info("a"), run_info("b")]
    assert run_columns(runs, {"a": "same", "b": "same"}) == ["same (a)", "same (b)"]


# ----------------------------------------------------------------------------- parcoords


def test_parcoords_draws_varying_settings_against_results(jobs_env, make_run):
    make_trained_run(make_run, "a", lr=1e-4, bleus=(2.0,))
    make_trained_run(make_run, "b", lr=1e-2, heads=4, bleus=(9.0,))
    make_run(runs_root(), "no-bleu", {"state": "running"})
    rows = run_rows(list_runs())
    assert [r["run"] for r in chart_rows(rows)] == ["b", "a"]  # no BLEU: no line
    assert varying_settings(chart_rows(rows)) == ["model.num_heads", "train.lr"]
    (trace,) = runs_parcoords(rows).to_dict()["data"]
    dims = {d["label"]: d for d in trace["dimensions"]}
    assert list(dims) == ["model.num_heads", "train.lr (log)", "final loss", "val loss",
                          "final BLEU"]  # fmt: skip
    assert list(dims["model.num_heads"]["values"]) == [4.0, 2.0]
    assert list(dims["train.lr (log)"]["values"]) == pytest.approx([-2, -4])
    assert "1e-4" in dims["train.lr (log)"]["ticktext"]
    assert list(trace["line"]["color"]) == [9.0, 2.0]
    assert trace["line"]["colorbar"]["title"]["text"] == "final BLEU"


def test_parcoords_encodes_categories_with_escaped_tick_text():
    rows = [
        {"final BLEU": 1.0, "final loss": 2.0, "train.schedule": "<b>x</b>"},
        {"final BLEU": 3.0, "final loss": 1.0, "train.schedule": "constant"},
        {"final BLEU": 2.0, "final loss": 1.5, "train.schedule": "constant"},
    ]
    (trace,) = runs_parcoords(rows, ["train.schedule"]).to_dict()["data"]
    schedule = trace["dimensions"][0]
    assert list(schedule["ticktext"]) == ["&lt;b&gt;x&lt;/b&gt;", "constant"]
    assert list(schedule["values"]) == [0, 1, 1] and list(schedule["tickvals"]) == [0, 1]
    assert [d["label"] for d in trace["dimensions"]] == ["train.schedule", "final loss",
                                                         "final BLEU"]  # fmt: skip


def test_parcoords_draws_a_zero_that_means_no_limit_as_its_word_and_short_ticks():
    """max_steps 0 ("no limit") was drawn below 500 as the number 0; BLEU ticks read 3.72171."""
    rows = [
        {"final BLEU": 3.72171, "final loss": 2.0, "train.max_steps": 0},
        {"final BLEU": 9.5, "final loss": 1.0, "train.max_steps": 500},
        {"final BLEU": 6.0, "final loss": 1.5, "train.max_steps": 2000},
    ]
    (trace,) = runs_parcoords(rows, ["train.max_steps"]).to_dict()["data"]
    steps, loss = trace["dimensions"][0], trace["dimensions"][1]
    assert list(steps["ticktext"]) == ["500", "2000", "no limit"]  # the word, after the numbers
    assert list(steps["values"]) == [2, 0, 1]
    assert loss["tickformat"] == ".4~g"  # at most 4 significant digits on numeric axes
    (plain_trace,) = runs_parcoords(rows[1:], ["train.max_steps"]).to_dict()["data"]
    assert list(plain_trace["dimensions"][0]["values"]) == [500.0, 2000.0]  # no 0: numbers


# ----------------------------------------------------------------------------- command


def run_command(*args, runs):
    """python -m core.runs_table ARGS, with the runs directory; (exit code, JSON lines, err)."""
    env = {**os.environ, "ATTENTION_STUDIO_RUNS": str(runs)}
    done = subprocess.run(
        [sys.executable, "-m", "core.runs_table", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def in_process(capsys, *args):
    """``core.runs_table.main(ARGS)`` in this process: (exit code, JSON lines, err)."""
    from core import runs_table

    code = runs_table.main(list(args))
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_the_command_prints_the_pages_rows(jobs_env, make_run, tmp_path, capsys, monkeypatch):
    make_trained_run(make_run, "alpha", created=1)
    make_trained_run(make_run, "beta", created=2)
    write_notes("alpha", "the baseline", "sweep")
    code, lines, _ = run_command("--runs", str(runs_root()), runs=tmp_path / "elsewhere")
    assert code == 0  # python -m core.runs_table itself, once
    assert lines == json.loads(json.dumps(run_rows(list_runs())))  # the same rows
    code, lines, _ = in_process(capsys, "--runs", str(runs_root()), "--tag", "sweep")
    assert [r["run"] for r in lines] == ["alpha"]
    code, lines, _ = in_process(capsys, "--search", "BET")
    assert [r["run"] for r in lines] == ["beta"]
    code, lines, err = in_process(capsys, "--runs", str(tmp_path / "missing"))
    assert code == 2 and lines == [] and "not a directory" in err


def test_the_command_refuses_a_state_no_run_can_be_in(jobs_env, make_run, capsys):
    """--state takes the states a run shows (as the Train page's filter): another word is one
    line and exit 2, never an empty answer that looks like no run matched."""
    from core.runs.status import FINAL_STATES, LIVE_STATES

    make_trained_run(make_run, "alpha", created=1)
    code, lines, err = in_process(capsys, "--runs", str(runs_root()), "--state", "bogus")
    assert code == 2 and lines == [] and len(err.strip().splitlines()) == 1
    assert "bogus" in err and all(state in err for state in (*LIVE_STATES, *FINAL_STATES))
    code, lines, _ = in_process(capsys, "--runs", str(runs_root()), "--state", "finished")
    assert code == 0 and [r["run"] for r in lines] == ["alpha"]


def test_damaged_run_files_give_empty_cells_not_errors(tmp_path):
    rd = RunDir(tmp_path)
    rd.metrics.write_bytes(b'{"record": "train", "loss": 1.0}\n\xff\xfe garbage\n')
    rd.config.write_text("[1, 2]")
    rd.job.write_text('{"settings": "not groups"}')
    metrics = final_metrics(tmp_path)  # the line that is not JSON (nor UTF-8) is skipped
    assert metrics["final loss"] == 1.0 and {
        v for k, v in metrics.items() if k != "final loss"
    } == {None}
    assert set(run_settings(tmp_path).values()) == {None}


def test_a_real_runs_settings_and_tokens_are_read_back(tiny_run):
    """The trainer's own files: config keys match the columns, tokens match its state."""
    from core.model.checkpoints import read_metadata

    settings = run_settings(tiny_run)
    assert (settings["train.lr"], settings["model.d_model"], settings["data.split"]) == (
        0.003,
        64,
        "head",
    )
    assert None not in settings.values()  # every column is a field the trainer records
    metrics = final_metrics(tiny_run)
    state = read_metadata(tiny_run / "last.pt")["state"]
    assert metrics["tokens"] == pytest.approx(state["tokens"], abs=2)
    assert metrics["elapsed (min)"] == pytest.approx(state["elapsed"] / 60, abs=0.01)
    assert metrics["final BLEU"] is None  # no validation split: no BLEU, not a zero
    assert 0 < metrics["final loss"] < 5


def test_a_chart_of_many_differing_settings_starts_with_a_few_axes(monkeypatch):
    """Issue 53, item 8: with ~22 differing settings the labels overlapped."""
    import core.figures.runs as runs_fig
    from core.figures.runs import DEFAULT_AXES, ROOMY_AXES, default_axes

    names = [f"train.s{k}" for k in range(22)]
    rows = [
        {"final BLEU": float(i), **{n: (i * (k + 1)) % (k + 2) for k, n in enumerate(names)}}
        for i in range(6)
    ]
    monkeypatch.setattr(runs_fig, "setting_names", lambda: names)
    shown = default_axes(rows)
    assert len(varying_settings(rows)) > DEFAULT_AXES == len(shown)
    assert runs_parcoords(rows, shown).data[0].labelangle == -20
    crowded = runs_parcoords(rows, names)
    assert len(crowded.data[0].dimensions) > ROOMY_AXES and crowded.data[0].labelangle == -45
