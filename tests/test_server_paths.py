"""Nothing a browser sees names this server's folders, and nothing it exports runs as a
formula (issue 31, item 8): messages name paths by the app's folders, the corpus of a
checkpoint is looked up only there and only by its SHA-1, tables escape formula cells."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from core.corpus.source import DataError, sha1_of
from core.corpus.user_files import allowed_path, stage_upload
from core.model.checkpoints import trained_data
from core.places import shown_path
from core.runs import exports
from core.runs.run_dir import RunDir
from tests.helpers import TINY, assert_clean, plain, run_page_script

ABSOLUTE = re.compile(r"(^|[\s('\"])/[A-Za-z]")  # a path from the root of this machine


def test_paths_are_shown_by_the_apps_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "models"))
    assert shown_path(TINY) == "data/tiny.tsv"  # the data folder of the tests
    assert shown_path(tmp_path / "runs" / "r1" / "last.pt") == "runs/r1/last.pt"
    assert shown_path(tmp_path / "runs" / ".uploads" / "ab.zip") == "uploads/ab.zip"
    assert shown_path(tmp_path / "models" / "m.pt") == "checkpoints/m.pt"
    assert shown_path("/etc/passwd") == "passwd"


@pytest.mark.parametrize("typed", ["/etc/passwd", "../../x.tsv", "~/secret.tsv"])
def test_a_refused_corpus_path_names_no_server_folder(typed):
    with pytest.raises(DataError) as e:
        allowed_path(typed)
    assert not ABSOLUTE.search(str(e.value)), str(e.value)
    assert "data/" in str(e.value)


def test_a_tilde_path_tells_no_account_of_the_server_apart():
    """Audit: ~user was expanded, so ~root/x.tsv said "outside them" and ~nosuchuser/x.tsv
    "Could not determine home directory": which accounts exist. Only ~/ (the server's own)
    is expanded; ~name is a name in the data folder, not found like any other."""
    said = []
    for typed in ("~root/x.tsv", "~nosuchuser123/x.tsv"):
        try:
            allowed_path(typed)
        except DataError as e:
            said.append(str(e))
        else:
            said.append("inside")
    assert said == ["inside", "inside"]  # (the file itself is not there: read_text says so)


def test_an_upload_too_large_names_no_server_folder():
    with pytest.raises(DataError) as e:
        stage_upload("big.tsv", b"x\ty\n" * (6 * 2**20))
    assert not ABSOLUTE.search(str(e.value)) and "data/" in str(e.value)


def test_a_checkpoints_corpus_is_found_only_in_the_apps_folders_and_by_its_sha1(
    tmp_path, monkeypatch
):
    """Found by the audit: an absolute recorded path anywhere on disk was read, and a file of
    the same name was taken when no SHA-1 was recorded."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    elsewhere = tmp_path / "elsewhere" / "pairs.tsv"
    elsewhere.parent.mkdir()
    shutil.copy(TINY, elsewhere)
    meta = {"data_config": {"source": str(elsewhere), "source_sha1": sha1_of(TINY)}}
    with pytest.raises(DataError, match="cannot be rebuilt") as e:
        trained_data(meta)  # not in the app's folders: never read
    assert not ABSOLUTE.search(str(e.value)), str(e.value)
    with pytest.raises(DataError, match="does not record its corpus's SHA-1"):
        trained_data({"data_config": {"source": "tiny.tsv"}})  # same name, unverifiable
    assert trained_data({"data_config": {"source": "tiny.tsv", "source_sha1": sha1_of(TINY)}})


def test_a_run_uploaded_corpus_is_found_in_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    shutil.copy(TINY, tmp_path / "runs" / "r1" / "data.tsv")
    meta = {"run": "r1", "data_config": {"source": "upload.tsv", "source_sha1": sha1_of(TINY)}}
    assert Path(trained_data(meta).source) == tmp_path / "runs" / "r1" / "data.tsv"
    with pytest.raises(DataError):
        trained_data({**meta, "run": "../r1"})  # only a run's own name


def test_the_model_picker_names_an_unusable_file_by_its_folder(studio_dirs):
    (studio_dirs["checkpoints"] / "broken.pt").write_bytes(b"not a checkpoint")
    at = run_page_script("translate.py")
    assert_clean(at)
    texts = [plain(m.value) for m in at.markdown] + [plain(c.value) for c in at.caption]
    (reason,) = [t for t in texts if "broken.pt" in t]
    assert "checkpoints/broken.pt" in reason and str(studio_dirs["checkpoints"]) not in reason


def test_the_settings_json_carries_no_server_path(tiny_run):
    path = json.loads(exports.config_json(RunDir(tiny_run)))["summary"]["path"]
    assert path.endswith("data/tiny.tsv") and not ABSOLUTE.search(path)


# ----------------------------------------------------------------------------- formulas


def test_the_runs_table_escapes_formulas_on_the_page_and_in_its_csv(studio_dirs):
    from core.runs.notes import write_notes

    run = studio_dirs["run"].name
    write_notes(run, '=HYPERLINK("http://x","click")', "+tag, ok")
    at = run_page_script("train.py", {"run": run})
    assert_clean(at)
    table = at.dataframe[-1].value  # the runs table, last on the page
    assert table["note"].iloc[0].startswith("'=HYPERLINK")
    assert list(table["tags"].iloc[0]) == ["'+tag", "ok"]
    assert "Runs table as CSV" in [b.label for b in at.get("download_button")]
    csv = exports.table_csv(pd.DataFrame({"note": ["=1+1", "plain"], "n": [1.0, float("nan")]}))
    assert csv.decode().splitlines() == ["note,n", "'=1+1,1.0", "plain,"]
