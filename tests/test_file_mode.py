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
    iter_records,
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
        read_records(b'{"line": 0, "error": "too long"}\nnot json\n')
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


def test_the_page_loads_a_results_file(studio_dirs, tiny_model, pairs, tmp_path, monkeypatch):
    from pages.ui import cached
    from pages.ui.shared_cache import RESULTS
    from tests.helpers import assert_clean, plain, run_page_script

    out = tmp_path / "out.jsonl"
    attribute_file(tiny_model, pairs, out, "alti")
    RESULTS.clear()
    read = [0]

    def counted(data):  # audit: an upload was parsed again at every rerun (~18x its size)
        read[0] += 1
        return iter_records(data)

    monkeypatch.setattr(cached, "iter_records", counted)
    at = run_page_script("attention.py", {"sentence": "i'm home .", "section": "attribution"})
    at.file_uploader(key="atr_file").set_value(("out.jsonl", out.read_bytes(), "text/plain"))
    at.run()
    assert_clean(at)
    panel = next(x for x in at.expander if x.label == "Attributions of a whole file")
    assert "**2 sentences explained**, 2 lines that could not be explained" in plain(
        " ".join(m.value for m in panel.markdown)
    )
    assert len(panel.dataframe) == 3
    at.run()  # a rerun (another widget touched): the file is not read again
    assert read == [1]
    at.file_uploader(key="atr_file").set_value(("x.jsonl", b"not json\n", "text/plain"))
    at.run()
    assert any("cannot be read" in e.value for e in at.error)


def test_records_are_read_one_line_at_a_time():
    """aggregate never holds a whole file's records: the lines before a bad one are read."""
    records = iter_records(b'{"line": 0, "error": "x"}\nnot json\n')
    assert next(records) == {"line": 0, "error": "x"}
    with pytest.raises(FileModeError, match="line 2"):
        next(records)


# ----------------------------------------------------------------------------- malformed files


@pytest.fixture(scope="module")
def written(tiny_model, tmp_path_factory) -> list[dict]:
    """The records the real file mode writes for PAIRS (grad-input: with raw scores)."""
    pairs = tmp_path_factory.mktemp("written") / "pairs.tsv"
    pairs.write_text(PAIRS, encoding="utf-8")
    attribute_file(tiny_model, pairs, pairs.with_name("out.jsonl"), "grad-input")
    return [json.loads(x) for x in pairs.with_name("out.jsonl").read_text().splitlines()]


def lines_of(records) -> bytes:
    """Records as a results file's bytes, written as the file mode writes them."""
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


BROKEN = {  # what is done to the second record (a full one) -> the field the error names
    "no contributions": (lambda r: r.pop("contributions"), "contributions"),
    "no rows": (lambda r: r.update(contributions=[]), "contributions"),
    "a short row": (lambda r: r["contributions"][1].pop(), r"contributions\[1\]"),
    "a row of text": (lambda r: r["contributions"].__setitem__(0, "abc"), r"contributions\[0\]"),
    "no shares": (lambda r: r.update(source_share=[]), "source_share"),
    "a share in words": (lambda r: r["source_share"].__setitem__(0, "x"), r"source_share\[0\]"),
    "a NaN share": (lambda r: r["source_share"].__setitem__(1, float("nan")), "source_share"),
    "an infinite score": (lambda r: r["contributions"][0].__setitem__(0, 1e400), "contributions"),
    "a huge integer": (lambda r: r["source_share"].__setitem__(0, 10**400), "source_share"),
    "a boolean score": (lambda r: r["source_share"].__setitem__(0, True), "source_share"),
    "source a number": (lambda r: r.update(source=5), "source"),
    "a token a list": (lambda r: r["source"].__setitem__(0, ["x"]), r"source\[0\]"),
    "no output": (lambda r: r.update(output=None), "output"),
    "no prefix": (lambda r: r.pop("prefix"), "prefix"),
    "step scores a list": (lambda r: r.update(step_scores=[1]), "step_scores"),
    "perplexity a number": (lambda r: r["step_scores"].update(perplexity=5), "perplexity"),
    "a line in words": (lambda r: r.update(line="two"), "line"),
    "a negative line": (lambda r: r.update(line=-1), "line"),
    "an error not text": (lambda r: r.update(error={"a": 1}), "error"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_malformed_record_is_a_file_mode_error_naming_its_line_and_field(written, case):
    broken, field = [dict(r) for r in written], BROKEN[case][1]
    broken[1] = json.loads(json.dumps(written[1]))  # a deep copy
    BROKEN[case][0](broken[1])
    with pytest.raises(FileModeError, match=rf"^line 2: .*{field}"):
        aggregate(read_records(lines_of(broken)))


@pytest.mark.parametrize(
    "line",
    [b"[" * 100_000, b'{"line": ' + b"9" * 5000 + b"}", b"NaN", b'{"line": 0} junk'],
    ids=["nested deep", "a long number", "NaN", "junk after"],
)
def test_a_line_json_cannot_read_is_a_file_mode_error(written, line):
    with pytest.raises(FileModeError, match="^line 2: "):
        read_records(lines_of(written[:1]) + line + b"\n")


def test_a_line_break_inside_a_token_is_part_of_its_record(written):
    """The writer ends records with \\n only: a token holding U+2028 or U+0085 stays whole."""
    record = json.loads(json.dumps(written[1]))
    record["source"][0] = "a\u2028b\x85c"
    assert read_records(lines_of([record]))[0]["source"][0] == "a\u2028b\x85c"


def test_a_malformed_file_on_the_page_is_an_error_not_an_exception(studio_dirs, written):
    from tests.helpers import assert_clean, plain, run_page_script

    broken = json.loads(json.dumps(written[1]))
    broken["contributions"] = []  # was a ZeroDivisionError in the page
    at = run_page_script("attention.py", {"sentence": "i'm home .", "section": "attribution"})
    at.file_uploader(key="atr_file").set_value(
        ("bad.jsonl", lines_of([written[0], broken]), "text/plain")
    )
    at.run()
    assert_clean(at)
    (error,) = [plain(e.value) for e in at.error if "cannot be read" in plain(e.value)]
    rows = f"{len(broken['output'])} rows, one per output token"
    assert error == f"bad.jsonl cannot be read: line 2: contributions must be {rows}."


# ----------------------------------------------------------------------------- --out checked


def one_error_line(err: str) -> str:
    """The command's error line (a note on a busy machine's CPU may come before it)."""
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("how", ["same path", "other spelling", "symlink", "hard link"])
def test_out_the_same_file_as_input_is_refused(tiny_checkpoint, tmp_path, capsys, how, monkeypatch):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(PAIRS.rstrip("\n"), encoding="utf-8")  # no last newline: it was cut off
    out = {"same path": pairs, "other spelling": tmp_path / "." / "pairs.tsv"}.get(how)
    if out is None:
        out = tmp_path / "link.jsonl"
        (out.symlink_to if how == "symlink" else out.hardlink_to)(pairs)
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(pairs), "--out", str(out)]
    assert attribute_cmd.main(args) == 2
    assert "same file as --input" in one_error_line(capsys.readouterr().err)
    assert pairs.read_text(encoding="utf-8") == PAIRS.rstrip("\n")


@pytest.mark.parametrize(
    "out, words",
    [
        ("missing/out.jsonl", "there is no folder"),
        ("folder", "is a folder"),
        ("note.txt/o.jsonl", "note.txt is not a folder"),
    ],
)
def test_out_in_a_missing_folder_or_a_folder_is_one_line(
    tiny_checkpoint, pairs, tmp_path, capsys, out, words
):
    (tmp_path / "folder").mkdir()
    (tmp_path / "note.txt").write_text("a note\n")
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(pairs)]
    assert attribute_cmd.main([*args, "--out", str(tmp_path / out)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: --out ") and words in line


@pytest.mark.parametrize(
    "notes", [b"my notes\n[1, 2]\nthe last line, no newline", b"one line, no newline", b"\x80 pt\n"]
)
def test_out_an_existing_file_of_something_else_is_refused_untouched(
    tiny_checkpoint, pairs, tmp_path, capsys, notes
):
    path = tmp_path / "notes.txt"
    path.write_bytes(notes)
    args = ["--checkpoint", str(tiny_checkpoint), "--input", str(pairs), "--out", str(path)]
    assert attribute_cmd.main(args) == 2
    assert "not an attributions file" in one_error_line(capsys.readouterr().err)
    assert path.read_bytes() == notes
