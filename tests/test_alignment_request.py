"""Alignment supervision asked for from the Train page: a teacher the app lists, or an
aligner's uploaded files, reach the trainer as data and supervise the run."""

from __future__ import annotations

import json
import shutil

import pytest

from core.corpus.supervision import read_supervision
from core.corpus.user_files import stage_upload
from core.places import checkpoints_root, runs_root
from core.runs import jobs
from core.runs import status as run_status
from core.runs.alignment_request import (
    ALIGN_WEIGHT,
    LINKS_NAME,
    PAIRS_NAME,
    AlignmentChoice,
    alignment_problems,
    requested_alignment,
    stage_alignment,
)
from core.runs.budget import ALIGNMENT_FILE_BYTES
from core.runs.run_dir import RunDir, RunError
from tests.helpers import wait_for
from tests.test_align_supervision import tiny_pairs, write_aligner_files
from tests.test_app_train import button, fill_tiny_form, train_page


def test_what_cannot_supervise_a_run_is_named(jobs_env, tiny_checkpoint):
    assert alignment_problems(None, {"align_weight": 0.0}) == []
    assert "needs alignments" in alignment_problems(None, {"align_weight": 0.1})[0]
    assert "no usable model" in alignment_problems(AlignmentChoice(teacher="/etc/passwd"), {})[0]
    both = AlignmentChoice(teacher="x", links=b"0-0\n", pairs=b"a ||| b\n")
    assert "not both" in alignment_problems(both, {})[0]
    assert "both the aligner's links" in alignment_problems(AlignmentChoice(links=b"0-0"), {})[0]
    big = AlignmentChoice(links=b"0" * (ALIGNMENT_FILE_BYTES + 1), pairs=b"a ||| b\n")
    assert "at most 16.0 MB" in alignment_problems(big, {})[0]
    checkpoints_root().mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_checkpoint, checkpoints_root() / "teacher.pt")
    assert alignment_problems(AlignmentChoice(teacher="checkpoints/teacher.pt"), {}) == []


def test_a_choice_is_kept_in_the_run_and_read_back_as_data(jobs_env, tmp_path, tiny_checkpoint):
    rd = RunDir(tmp_path / "run")
    rd.create()
    train = {"align_weight": 0.0}
    asked = stage_alignment(rd, AlignmentChoice(links=b"0-0\n", pairs=b"a ||| b\n"), train)
    assert (
        asked == {"links": LINKS_NAME, "pairs": PAIRS_NAME}
        and train["align_weight"] == ALIGN_WEIGHT
    )
    rd.request.write_text(json.dumps({"settings": {}, "alignment": asked}))
    assert requested_alignment(rd) == (None, str(rd.path / LINKS_NAME), str(rd.path / PAIRS_NAME))
    assert (rd.path / LINKS_NAME).read_bytes() == b"0-0\n"
    rd.request.write_text(json.dumps({"settings": {}, "alignment": {"links": "/etc/passwd"}}))
    assert requested_alignment(rd)[1] == str(rd.path / LINKS_NAME)  # only the run's own files
    rd.request.write_text(json.dumps({"settings": {}}))
    assert requested_alignment(rd) == (None, None, None)


def _finished(run_id: str):
    return wait_for(
        lambda: (i := run_status.run_info(run_id)).state in ("finished", "failed") and i,
        timeout=120,
        what="the run to end",
    )


def test_a_teacher_the_app_lists_supervises_a_run(
    jobs_env, tiny_settings, tiny_corpus, tiny_checkpoint
):
    checkpoints_root().mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_checkpoint, checkpoints_root() / "teacher.pt")
    tiny_settings["data"]["source"] = str(stage_upload("tiny.tsv", tiny_corpus.read_bytes()))
    tiny_settings["train"] |= {"align_layer": 1, "align_head": 2, "epochs": 2}  # it ends
    with pytest.raises(RunError, match="no usable model"):
        jobs.start_run("d2l", tiny_settings, alignment=AlignmentChoice(teacher="teacher.pt"))
    run_id = jobs.start_run(
        "d2l", tiny_settings, alignment=AlignmentChoice(teacher="checkpoints/teacher.pt")
    )
    info = _finished(run_id)
    rd = RunDir(runs_root() / run_id)
    assert info.state == "finished", rd.path.joinpath("train.log").read_text()[-2000:]
    train = json.loads(rd.config.read_text())["train"]
    assert (train["align_layer"], train["align_head"], train["align_weight"]) == (
        1,
        2,
        ALIGN_WEIGHT,
    )
    assert (
        train["align_source"].startswith("teacher.pt") and "pairs aligned" in train["align_source"]
    )
    assert str(checkpoints_root()) not in rd.config.read_text()  # the file's name only
    assert len(read_supervision(rd.path / "alignments.txt")) == tiny_settings["data"]["num_train"]


def test_an_aligners_uploaded_files_supervise_a_run_from_the_form(jobs_env, tmp_path, monkeypatch):
    pairs_file, links_file = write_aligner_files(tmp_path, tiny_pairs())
    at = train_page()
    at.radio(key="align_from").set_value("files").run()
    assert len(at.get("file_uploader")) >= 2  # the two files, shown at once (outside the form)
    fill_tiny_form(at, **{"train.epochs": 2})  # the app's tiny job, ending by itself
    choice = AlignmentChoice(links=links_file.read_bytes(), pairs=pairs_file.read_bytes())
    import pages.ui.train.form as form

    # AppTest cannot upload a file: the uploads' bytes, as alignment_choice reads them
    monkeypatch.setattr(form, "alignment_choice", lambda: choice)
    button(at, "Launch training").click().run()
    assert not at.error, [e.value for e in at.error]
    (run_id,) = [p.name for p in runs_root().iterdir() if p.is_dir() and not p.name.startswith(".")]
    info = _finished(run_id)
    rd = RunDir(runs_root() / run_id)
    assert info.state == "finished", rd.path.joinpath("train.log").read_text()[-2000:]
    assert json.loads(rd.request.read_text())["alignment"] == {
        "links": LINKS_NAME,
        "pairs": PAIRS_NAME,
    }
    train = json.loads(rd.config.read_text())["train"]
    assert train["align_source"].startswith(f"{LINKS_NAME} (30 pairs); ")
    assert train["align_weight"] == ALIGN_WEIGHT and rd.path.joinpath("alignments.txt").is_file()
