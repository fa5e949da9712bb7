"""``python -m core.translate --json / --target / --d2l-check`` print what the Translate page
shows, from the same library functions, and refuse bad input in one line (exit code 2)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from core import translate as command
from core.model.checked_translation import (
    first_choices,
    target_record,
    translate_sentence,
    translation_record,
)
from core.model.d2l_check import d2l_check
from core.model.parts import DecodeSettings
from tests.helpers import assert_clean, plain, run_page_script

TARGET = "je suis calme ."  # a translation of "i'm home ." the model does not write itself


class ReachedError(Exception):
    """A refused flag reached the model."""


def refuse(*_, **__):
    raise ReachedError("a refused flag reached the model")


@pytest.fixture
def opened(monkeypatch, tiny_model):
    """The command opens the tiny model, whatever --checkpoint says."""
    monkeypatch.setattr(command, "open_model", lambda *args, **kwargs: tiny_model)
    return tiny_model


def printed(capsys, argv: list[str]) -> tuple[int, list[dict]]:
    """The command's exit code and its stdout's JSON lines."""
    code = command.main(["--checkpoint", "x.pt", *argv])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def as_json(value) -> object:
    """A value as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("flags, settings", [([], DecodeSettings()), (["--beam", "3"], None)])
def test_json_lines_are_the_pages_translation_figures(opened, capsys, flags, settings):
    settings = settings or DecodeSettings(beam_size=3)
    sentences = ["i'm home .", "go ."]
    code, lines = printed(capsys, ["--json", *flags, *sentences])
    assert code == 0 and len(lines) == 2
    for sentence, line in zip(sentences, lines):
        t = translate_sentence(opened, sentence, settings)
        assert line == as_json({"sentence": sentence, **translation_record(t, settings)})
        assert line["steps"] == len(t.output_tokens) and line["log_prob"] == t.log_prob
        assert [c[0][0] for c in line["topk"]] == [c[0][0] for c in t.topk]
    assert lines[0]["decoding"] == ("greedy" if settings.beam_size == 1 else "beam 3, α 0.6")


def test_plain_text_output_is_unchanged(opened, capsys):
    assert command.main(["--checkpoint", "x.pt", "i'm home ."]) == 0
    expected, _ = opened.translate_lines(["i'm home ."], DecodeSettings())
    assert capsys.readouterr().out.splitlines() == expected


def test_target_is_rated_as_the_page_rates_it(opened, capsys):
    code, lines = printed(capsys, ["--target", TARGET, "i'm home ."])
    forced = translate_sentence(opened, "i'm home .", DecodeSettings(), TARGET)
    own = translate_sentence(opened, "i'm home .", DecodeSettings())
    assert code == 0 and lines == [as_json(target_record(forced, own))]
    (line,) = lines
    assert line["first_choices"] == first_choices(forced) == sum(r == 1 for r in forced.ranks)
    assert line["tokens"] == len(forced.ranks) and line["ranks"] == forced.ranks
    assert line["token_probs"] == forced.token_probs and line["own_log_prob"] == own.log_prob


def test_d2l_check_prints_the_pages_bleu_and_rows(opened, capsys):
    code, lines = printed(capsys, ["--d2l-check"])
    check = d2l_check(opened, DecodeSettings())
    assert code == 0 and lines == [as_json(asdict(check))]
    assert lines[0]["bleu"] == check.bleu and len(lines[0]["rows"]) == 4


def test_a_sentence_that_cannot_be_translated_is_a_json_error_line(opened, capsys):
    long = " ".join(["go"] * 61)
    code, lines = printed(capsys, ["--json", "i'm home .", long])
    assert code == 0 and "error" not in lines[0]
    assert lines[1]["sentence"] == long and "at most 60 tokens" in lines[1]["error"]
    code, lines = printed(capsys, ["--json", long])
    assert code == 1 and "error" in lines[0]


BLANK_OR_NOT_ONE = "--target rates a translation (not blank) of exactly one sentence"
NOTHING_OR_BOTH = "give a sentence or --input FILE, or --d2l-check alone"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "", "i'm home ."], BLANK_OR_NOT_ONE),
        (["--target", "   ", "i'm home ."], BLANK_OR_NOT_ONE),
        (["--target", TARGET, "i'm home .", "go ."], BLANK_OR_NOT_ONE),
        (["--target", TARGET, "--input", "lines.txt"], BLANK_OR_NOT_ONE),
        (["--target", TARGET], NOTHING_OR_BOTH),
        (["--d2l-check", "i'm home ."], NOTHING_OR_BOTH),
        (["--d2l-check", "--input", "lines.txt"], NOTHING_OR_BOTH),
        (["--json"], NOTHING_OR_BOTH),
        (["--target"], "argument --target: expected one argument"),
    ],
)
def test_bad_requests_are_one_line_before_the_model_loads(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(command, "open_model", refuse)
    assert command.main(["--checkpoint", "x.pt", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_target_too_long_is_one_line(opened, capsys):
    assert command.main(["--checkpoint", "x.pt", "--target", "oui " * 61, "i'm home ."]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and "The target has 61 tokens" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv, what", [(["--d2l-check"], "d2l"), (["--target", TARGET, "go ."], "force")]
)
def test_a_model_that_cannot_is_one_line(opened, monkeypatch, capsys, argv, what):
    """A model refusing the d2l check or rating a typed translation says why, in one line."""
    monkeypatch.setattr(opened, "supports", lambda asked: "It cannot." if asked == what else None)
    assert command.main(["--checkpoint", "x.pt", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: It cannot.\n"


def test_the_page_shows_the_commands_figures(studio_dirs, capsys):
    """The Translate page and the command, on the same checkpoint, agree on every figure."""
    checkpoint = str(studio_dirs["checkpoints"] / "fra-eng-small.pt")
    at = run_page_script("translate.py", {"sentence": "i'm home .", "target": TARGET})
    at.button(key="tr_d2l").click().run()
    assert_clean(at)
    argv = ["--checkpoint", checkpoint]
    assert command.main([*argv, "--json", "i'm home ."]) == 0
    assert command.main([*argv, "--target", TARGET, "i'm home ."]) == 0
    assert command.main([*argv, "--d2l-check"]) == 0
    own, rated, d2l = (json.loads(s) for s in capsys.readouterr().out.splitlines())
    shown = plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))
    assert f"log-probability {own['log_prob']:.2f} · {own['steps']} decoder steps · greedy" in shown
    assert at.dataframe[0].value.to_dict("records") == own["candidates"]
    assert (
        f"log-probability **{rated['log_prob']:.2f}** (the model's own translation: "
        f"{rated['own_log_prob']:.2f}) · {rated['first_choices']} of {rated['tokens']} tokens "
        "are the model's first choice"
    ) in shown
    assert at.dataframe[1].value.to_dict("records") == rated["rows"]
    assert at.metric[0].value == f"{d2l['bleu']:.1f}"
    assert at.dataframe[2].value.to_dict("records") == d2l["rows"]


UNSAFE = "i'm\u2028home \u009b31m . \u0085\u001b"  # line ends and terminal controls, typed


def test_typed_line_ends_and_controls_stay_data_in_every_output(opened, capsys):
    """U+2028 / U+2029 / U+0085 end a line for ``str.splitlines`` and U+009B starts a
    terminal's control sequence; ``ensure_ascii=False`` writes them raw. Every command's lines
    (``command_line.terminal_safe``) write them as JSON escapes: one line, the same value."""
    code = command.main(["--checkpoint", "x.pt", "--json", UNSAFE, "go ."])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and json.loads(lines[0])["sentence"] == UNSAFE
    for text in (out, err):
        assert not any(ch in text for ch in "\u2028\u0085\u009b\u001b")
    command.main(["--checkpoint", "x.pt", UNSAFE])  # the plain text and its warnings
    assert not any(ch in "".join(capsys.readouterr()) for ch in "\u2028\u0085\u009b\u001b")


def test_terminal_safe_keeps_json_values_and_tabs():
    from core.command_line import one_line, terminal_safe

    value = {"s": "a\u2029b\u0080c\td\x7fe", "n": 1}
    line = terminal_safe(json.dumps(value, ensure_ascii=False))
    assert json.loads(line) == value and len(line.splitlines()) == 1
    assert terminal_safe("plain é text\tand tabs") == "plain é text\tand tabs"
    assert one_line(ValueError("bad\u009b1m\nword")) == "bad\\u009b1m word"
