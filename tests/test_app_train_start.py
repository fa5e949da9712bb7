"""AppTest tests of the Train page where a new user tripped (issue 68, items 3, 9 and 12;
issue 69, items 4 and 5): what the start-up is doing, the ETA right after a resume, a run
too short to learn, "Train longer", empty model outputs, uploads, and a saved model."""

from __future__ import annotations

import json
import time

from core.places import checkpoints_root, runs_root
from core.runs import jobs
from tests.helpers import fake_trainer, plain
from tests.test_app_train import button, train_page, uploaded


def progress_text(at) -> str:
    """The progress bar's words."""
    return plain(at.get("progress")[0].proto.text)


def test_a_loading_run_says_which_phase_and_for_how_long(jobs_env, make_run):
    """Issue 68, item 3: eleven minutes of start-up read only "reading the corpus and building
    the vocabularies"."""
    launched = {"created_at": time.time() - 100}  # 100 s ago; in its phase for 65 s
    rd = make_run(runs_root(), "early", {"state": "starting"}, job=launched)
    sleeper = fake_trainer(rd.path)
    try:
        words = "learning BPE (cached next time)"
        rd.write_status(pid=sleeper.pid, message=words, phase_started_at=time.time() - 65)
        text = progress_text(train_page("early"))
        phase, launched = text.split(" · ")  # however slowly the page ran: over a minute
        assert phase.startswith(f"{words} for ") and " min " in phase, text
        assert launched.endswith(" since launch") and " min " in launched, text
    finally:
        sleeper.kill()
        sleeper.wait()


def test_right_after_resume_the_eta_is_not_zero(jobs_env, make_run):
    """Issue 69, item 5: "step 139 of 1,200 · ETA 0 s" right after Resume."""
    rd = make_run(runs_root(), "again", {"state": "finished", "step": 139, "eta_s": 0.0})
    rd.write_status(total_steps=1200, progress=0.12)
    time.sleep(0.05)
    sleeper = fake_trainer(rd.path)
    try:
        job = json.loads(rd.job.read_text()) | {"launched_at": time.time(), "pid": sleeper.pid}
        rd.job.write_text(json.dumps(job))  # resumed: launched after the status's last write
        text = progress_text(train_page("again"))  # before the trainer wrote a word
        assert "ETA 0 s" not in text and text.endswith("since launch"), text
        rd.write_status(state="running", eta_s=None)  # its first words (training_run)
        text = progress_text(train_page("again"))
        assert "step 139 of 1,200 · ETA estimating…" in text, text
    finally:
        sleeper.kill()
        sleeper.wait()


def short_run(runs, owner: str | None = None):
    """A finished "small" run whose ten-minute budget bought 71 steps and BLEU 0."""
    from tests.helpers import make_run

    status = {"state": "finished", "step": 71, "best_bleu": 0.0, "progress": 1.0}
    rd = make_run(runs, "short", status, job={"preset": "small", "owner": owner}, checkpoint=True)
    config = {"summary": {"val": 3153}, "train": {"time_budget": 600.0}}
    rd.write_config({"data": {}, "model": {}, **config})
    examples = [{"src": "go .", "out": "", "ref": "va !"}]
    rd.append_metrics({"record": "eval", "step": 71, "val_bleu": 0.0, "examples": examples})
    return rd


def test_a_run_too_short_to_learn_says_so_and_trains_longer(jobs_env, monkeypatch):
    """Issue 68, item 3 and issue 69, item 4: a ten-minute run ended at step 71 with BLEU 0
    and offered only Delete and Save; its model output was blank."""
    short_run(runs_root())
    asked = []
    monkeypatch.setattr(jobs, "resume_run", lambda *a, **k: asked.append(a[:2]))
    at = train_page("short")
    (note,) = [plain(w.value) for w in at.warning if "training steps" in w.value]
    assert "bought 71 training steps" in note and "Train longer" in note
    (examples,) = [d.value for d in at.dataframe if "model output" in d.value.columns]
    assert examples["model output"].tolist() == ["(empty)"]
    assert at.radio(key="longer_unit_short").value == "minutes"  # it had a time budget
    at.number_input(key="longer_minutes_short").set_value(20)
    button(at, "Train longer").click().run()
    assert asked == [("short", {"epochs": 0, "max_steps": 0, "time_budget": 1200.0})]
    at.radio(key="longer_unit_short").set_value("steps").run()
    at.number_input(key="longer_steps_short").set_value(-5)
    button(at, "Train longer").click().run()
    assert any("more steps must be a positive number" in plain(e.value) for e in at.error)
    assert len(asked) == 1


def test_train_longer_is_offered_to_the_runs_owner_only(jobs_env, monkeypatch):
    from core.runs import owners

    short_run(runs_root(), owner="alice")
    monkeypatch.setenv(owners.IDENTITY_ENV, "streamlit")  # nobody signed in under AppTest
    at = train_page("short")
    assert "Train longer" not in [b.label for b in at.button]
    assert any("Sign in" in plain(c.value) for c in at.caption)


def test_a_csv_upload_says_what_is_wrong_and_a_new_pick_clears_it(jobs_env):
    """Issue 68, item 9: a CSV got Streamlit's "text/csv files are not allowed", and a
    previous file's error stayed after a new pick."""
    at = uploaded(b"english,french\nGo.,Va !\n", "pairs.csv")
    (error,) = [plain(e.value) for e in at.error]
    assert error.startswith("pairs.csv has no TAB in it: it looks like comma-separated values")
    label = at.get("file_uploader")[0].proto.label
    assert ".tsv" in label and ".zip" in label and "TAB" in label
    good = "".join(f"I am {i}.\tJe suis {i}.\n" for i in range(200)).encode()
    at.file_uploader(key="data_upload").set_value(("good.tsv", good, "text/plain")).run()
    assert not at.error and [s.value for s in at.success] == ["200 usable pairs, 0 skipped lines."]


def test_a_saved_model_stays_said_and_a_second_save_is_explained(jobs_env, make_run):
    """Issue 68, item 12: after a save the page said nothing once it ran again, and a second
    click said only that the name exists."""
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    at = train_page("done")
    next(t for t in at.text_input if t.label == "Model name").set_value("mine")
    button(at, "Save model").click().run()
    assert (checkpoints_root() / "mine.pt").is_file()
    at.run()  # the page runs again (any click elsewhere)
    assert any("Saved as mine.pt" in plain(c.value) for c in at.caption)
    button(at, "Save model").click().run()
    assert any("already exists" in plain(e.value) for e in at.error)
    assert any("Saved as mine.pt" in plain(c.value) for c in at.caption)


def new_run_box(at):
    """The "New run" expander's proto (its label, whether it is drawn open, its icon)."""
    (box,) = [e.proto for e in at.expander if e.label == "New run"]
    return box


def test_new_run_starts_folded_where_a_run_is_shown_and_shows_its_state(jobs_env, make_run):
    """Issue 69, item 3: "New run" needed two clicks once a run was shown: it was drawn open
    above the run, its "+" icon standing where the chevron would say so, and the first click
    folded it."""
    at = train_page()  # no run yet: the form is what the page is for
    assert new_run_box(at).expanded is True and new_run_box(at).icon == ""
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    at.run()  # a run appearing meanwhile never folds a form being filled in
    assert new_run_box(at).expanded is True
    shown = train_page("done")  # a session that comes to a run: one click opens the form
    assert new_run_box(shown).expanded is False and new_run_box(shown).icon == ""
