"""Attributions of a whole file (issue 51, item 4): every line as the one-sentence command
explains it, resumable, errors per line, read back and summed up on the page."""

from __future__ import annotations

import json

import pytest

from core import attribute as attribute_cmd
from core.attribution.explain import sentence_json
from core.attribution.file_mode import (
    FileModeError,
    aggregate,
    attribute_file,
    read_input,
    read_records,
)
from core.attribution.gradients import GradientChoices
from core.model.checked_translation import translate_sentence

PAIRS = (
    "i'm home .\n"
    "\n"  # an empty line: skipped, its index kept by the others
    "i'm cold .\tj'ai froid .\n"
    "i'm home .\tje suis chez moi .\tje suis chez elle .\n"
    "i'm home .\tje suis chez moi .\tje suis chez moi .\n"  # a contrast equal: an error line
)


@pytest.fixture
def pairs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(PAIRS, encoding="utf-8")
    return path


def test_every_line_is_what_the_one_sentence_command_prints(tiny_model, pairs, tmp_path):
    out = tmp_path / "out.jsonl"
    summary = attribute_file(tiny_model, pairs, out, "grad-input")
    assert summary | {"seconds": 0} == {
        "lines": 4, "written": 4, "skipped": 0, "errors": 1, "seconds": 0
    }  # fmt: skip
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in records] == [0, 2, 3, 4]
    assert "the translation itself" in records[3]["error"]
    t = translate_sentence(tiny_model, "i'm home .", target="je suis chez moi .")
    alone = sentence_json(tiny_model, t, "grad-input", contrast="je suis chez elle .")
    for key in ("contributions", "raw", "contrast", "contrast_steps", "step_scores"):
        assert records[2][key] == alone[key], key
    assert records[1]["target_text"] == "j'ai froid ." and records[1]["target"] is True


def test_an_interrupted_run_goes_on_where_it_stopped(tiny_model, pairs, tmp_path):
    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs, out, "alti")
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # killed while writing line 3
    again = attribute_file(tiny_model, pairs, out, "alti")
    assert (again["skipped"], again["written"]) == (2, 2)  # line 3's record was cut
    records = [json.loads(x) for x in out.read_text().splitlines() if x.endswith("}")]
    assert sorted(r["line"] for r in records) == [0, 2, 3, 4]
    with pytest.raises(FileModeError, match="made with alti"):
        attribute_file(tiny_model, pairs, out, "grad-input")
    with pytest.raises(FileModeError, match="other choices"):
        attribute_file(tiny_model, pairs, out, "alti", choices=GradientChoices(aggregation="l2"))


def test_the_command_writes_the_file_and_prints_a_summary(tiny_checkpoint, pairs, tmp_path, capsys):
    out = tmp_path / "cmd.jsonl"
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(pairs), "--out", str(out)]
    assert attribute_cmd.main([*args, "--method", "attention"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["written"] == 4 and len(out.read_text().splitlines()) == 4
    assert attribute_cmd.main(["--checkpoint", str(tiny_checkpoint), "--input", str(pairs)]) == 2
    assert "--input and --out go together" in capsys.readouterr().err


def test_bad_inputs_are_named(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"\xff\xfe not text")
    with pytest.raises(FileModeError, match="not UTF-8"):
        read_input(bad)
    with pytest.raises(FileModeError, match="cannot be read"):
        read_input(tmp_path / "missing.tsv")
    with pytest.raises(FileModeError, match="not JSON"):
        read_records(b'{"line": 0}\nnot json\n')
    with pytest.raises(FileModeError, match="no 'line'"):
        read_records(b'{"method": "alti"}\n')


def test_a_file_is_summed_up_by_position_token_and_sentence(tiny_model, pairs, tmp_path):
    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs, out, "alti")
    result = aggregate(read_records(out))
    records = [r for r in read_records(out) if "error" not in r]
    assert result.errors == 2 and len(result.per_sentence) == len(records) == 2  # alti: no contrast
    first = [r["source_share"][0] for r in records]
    row0 = result.by_position.iloc[0]
    assert row0["sentences"] == 2 and row0["mean source share"] == pytest.approx(sum(first) / 2)
    home = [
        sum(row[r["source"].index("home")] for row in r["contributions"]) / len(r["output"])
        for r in records
        if "home" in r["source"]
    ]
    got = result.by_token.set_index("token").loc["home"]
    assert got["occurrences"] == len(home)
    assert got["mean contribution"] == pytest.approx(sum(home) / len(home))


def test_the_page_loads_a_results_file(studio_dirs, tiny_model, pairs, tmp_path):
    from tests.helpers import assert_clean, plain, run_page_script

    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs, out, "alti")
    at = run_page_script("attention.py", {"sentence": "i'm home .", "section": "attribution"})
    at.file_uploader(key="atr_file").set_value(("out.jsonl", out.read_bytes(), "text/plain"))
    at.run()
    assert_clean(at)
    panel = next(x for x in at.expander if x.label == "Attributions of a whole file")
    assert "**2 sentences explained**, 2 lines that could not be explained" in plain(
        " ".join(m.value for m in panel.markdown)
    )
    assert len(panel.dataframe) == 3
    at.file_uploader(key="atr_file").set_value(("x.jsonl", b"not json\n", "text/plain"))
    at.run()
    assert any("cannot be read" in e.value for e in at.error)
