"""One way to read a sentence pair (issue 68, item 8): every reader of pairs (``core.align
--data``, ``core.attribute --input``, ``core.train --align-pairs``, a corpus, the page's gold
sets) takes ``source ||| target`` and ``source<TAB>target`` alike, through ``pair_columns``."""

from __future__ import annotations

import json

import pytest

from core import align as align_cmd
from core import attribute as attribute_cmd
from core.alignment.gold import GoldError, read_pairs
from core.attribution.file_mode import InputLine, read_input
from core.corpus.source import pair_columns, parse_pairs, split_pair

TAB = "i'm home .\tje suis chez moi .\ngo .\tva !\n"
BARS = "i'm home . ||| je suis chez moi .\ngo . ||| va !\n"


@pytest.mark.parametrize(
    ("line", "columns"),
    [
        ("go .\tva !", ["go .", "va !"]),
        ("go . ||| va !", ["go .", "va !"]),
        ("go .|||va !", ["go .", "va !"]),
        ("go . ||| va ! ||| va-t'en !", ["go .", "va !", "va-t'en !"]),
        ("go .\tva !\tCC-BY 2.0", ["go .", "va !", "CC-BY 2.0"]),
        ("a ||| b\tc", ["a ||| b", "c"]),  # a TAB, where there is one, separates
        ("go .", ["go ."]),
    ],
)
def test_a_line_is_cut_at_its_tabs_or_else_at_its_bars(line, columns):
    assert pair_columns(line) == columns


def test_a_corpus_reads_both():
    assert split_pair("go . ||| va !\n") == ("go .", "va !")
    assert (
        parse_pairs(BARS)[0]
        == parse_pairs(TAB)[0]
        == [
            ("i'm home .", "je suis chez moi ."),
            ("go .", "va !"),
        ]
    )


def test_align_pairs_read_both(tmp_path):
    (tmp_path / "bars.txt").write_text(BARS, encoding="utf-8")
    (tmp_path / "tab.tsv").write_text(TAB, encoding="utf-8")
    assert read_pairs(tmp_path / "tab.tsv") == read_pairs(tmp_path / "bars.txt")
    (tmp_path / "bad.txt").write_text("a ||| b ||| c\n", encoding="utf-8")
    with pytest.raises(GoldError, match="line 1: needs exactly one '|||' \\(or one TAB\\)"):
        read_pairs(tmp_path / "bad.txt")


def test_attribution_input_reads_both(tmp_path):
    (tmp_path / "bars.txt").write_text("go . ||| va ! ||| pars !\nhi .\n", encoding="utf-8")
    (tmp_path / "tab.tsv").write_text("go .\tva !\tpars !\nhi .\n", encoding="utf-8")
    expected = [InputLine(0, "go .", "va !", "pars !"), InputLine(1, "hi .")]
    assert read_input(tmp_path / "bars.txt") == read_input(tmp_path / "tab.tsv") == expected


def test_the_align_command_takes_a_tab_file(tiny_checkpoint, tmp_path, capsys):
    """``core.align --data`` prints the same links for the two spellings of one file."""
    out = []
    for name, text in (("bars.txt", BARS), ("tab.tsv", TAB)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        args = ["--checkpoint", str(tiny_checkpoint), "--data", str(tmp_path / name)]
        assert align_cmd.main([*args, "--layer", "1", "--head", "mean", "--mode", "awo"]) == 0
        out.append(capsys.readouterr().out)
    assert out[0] == out[1] and len(out[0].splitlines()) == 2


def test_the_attribute_command_takes_a_bars_file(tiny_checkpoint, tmp_path, capsys):
    """``core.attribute --input`` explains the same records for the two spellings."""
    records = []
    for name, text in (("bars.txt", BARS), ("tab.tsv", TAB)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        out = tmp_path / f"{name}.jsonl"
        args = ["--checkpoint", str(tiny_checkpoint), "--input", str(tmp_path / name)]
        assert attribute_cmd.main([*args, "--out", str(out), "--method", "attention"]) == 0
        capsys.readouterr()
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        keys = ("source_text", "target_text", "contributions")
        records.append([{k: r[k] for k in keys} for r in rows])
    assert records[0] == records[1] and records[0][0]["target_text"] == "je suis chez moi ."


def test_an_upload_of_bars_with_commas_is_not_taken_for_csv():
    """The Train page's upload check: commas in a ``|||`` file are words, not CSV cells."""
    from core.corpus.user_files import upload_problem

    assert upload_problem("pairs.txt", b"yes, i am ||| oui, je le suis\n") is None
    assert "CSV" in upload_problem("pairs.csv", b"yes, i am,oui, je le suis\n")
