"""Every command's numeric flags are checked as the pages check them (issue 69, item 1): a
value out of its range is one ``error:`` line naming the range, exit code 2, before any model,
corpus or trainer is touched."""

from __future__ import annotations

import argparse
import importlib
import math

import pytest
import torch

import core.model.opened
from core.command_line import (
    CommandError,
    CommandParser,
    InRange,
    add_decode_flags,
    decode_settings,
)
from core.model.checked_translation import translate_sentence
from core.model.parts import ALPHAS, BEAM_SIZES, GREEDY, MAX_LENS
from tests.helpers import SHIPPED
from tests.test_architecture import COMMANDS


class ReachedError(Exception):
    """A command went past its flags' checks: it read a model, a corpus or started training."""


def refuse(*_, **__):
    raise ReachedError("a flag out of range reached the work")


@pytest.fixture
def nothing_loads(monkeypatch):
    """Every way a command reaches a model, a corpus or the trainer raises ``ReachedError``."""
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(core.model.opened, "open_model", refuse)
    for name in COMMANDS:
        module = importlib.import_module(f"core.{name}")
        for attr in ("open_model", "load_splits", "launch", "with_alignments"):
            if hasattr(module, attr):
                monkeypatch.setattr(module, attr, refuse)
    train = importlib.import_module("core.train")
    monkeypatch.setattr(train, "run", refuse)  # core.runs.training_run.run: the trainer


def required_args(parser: argparse.ArgumentParser, skip: argparse.Action) -> list[str]:
    """The least a parser needs besides ``skip``: each required flag and positional as "x"."""
    argv = []
    for group in parser._mutually_exclusive_groups:
        if group.required and skip not in group._group_actions:
            argv += [group._group_actions[0].option_strings[0], "x"]
    grouped = {a for g in parser._mutually_exclusive_groups for a in g._group_actions}
    for action in parser._actions:
        if action is skip or action in grouped:
            continue
        if not action.option_strings:
            argv += ["x"] if action.nargs is None else []
        elif action.required:
            argv += [action.option_strings[0], "x"]
    return argv


def numeric_flags() -> list[tuple[str, argparse.Action]]:
    """(command, action) for every flag of every command whose value is a number."""
    found = []
    for name in COMMANDS:
        parser = importlib.import_module(f"core.{name}").build_parser()
        found += [
            (name, a)
            for a in parser._actions
            if isinstance(a.type, InRange) or a.type in (int, float)
        ]
    return found


def out_of_range(action: argparse.Action) -> list[str]:
    """Values the flag must refuse: below, above, huge, and NaN and infinities."""
    t = action.type
    values = ["nan", "inf", "-inf", "1e400", str(10**30), "-3"]
    if isinstance(t, InRange):
        step = 1 if t.kind is int else 1e-9 * max(1, abs(t.most))
        values = [v for v in values if v != "-3" or not t.holds(-3)]
        values += [str(t.least) if t.above else str(t.least - step), str(t.most + step)]
        values += [] if t.holds(0) else ["0"]
    return values


FLAGS = numeric_flags()


def test_the_walk_finds_every_command_and_its_numbers():
    """The walk sees every command and the flags the issue names."""
    names = {(c, a.option_strings[0]) for c, a in FLAGS}
    assert {("translate", "--beam"), ("translate", "--alpha"), ("translate", "--max-len")} <= names
    assert {("train", "--processes"), ("train", "--d-model"), ("train", "--lr")} <= names
    assert {c for c, _ in FLAGS} >= {
        "translate", "evaluate", "ablate", "attribute", "align", "inside_head", "project",
        "trajectories", "export_tensorboard", "train",
    }  # fmt: skip


@pytest.mark.parametrize(("command", "action"), FLAGS, ids=[f"{c}{a.dest}" for c, a in FLAGS])
def test_every_numeric_flag_refuses_out_of_range_values_in_one_line(
    command, action, nothing_loads, capsys, tmp_path, monkeypatch
):
    """Each out-of-range value: exit 2, one ``error:`` line naming the flag, no traceback, and
    nothing loaded. A number is an ``InRange`` (its range from where the page reads it), or a
    training setting, which the Train page's own launch check refuses."""
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"core.{command}")
    parser = module.build_parser()
    assert isinstance(parser, CommandParser), f"core.{command} parses with argparse's own"
    setting = command == "train" and ("." in action.dest or action.dest == "processes")
    assert isinstance(action.type, InRange) or action.choices or setting, (
        f"{command} {action.option_strings[0]}: a number with no range (use InRange)"
    )
    (flag,) = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
    base = required_args(parser, action)
    if command == "train":
        base = ["--out", str(tmp_path / "run"), "--no-progress"]
    for value in out_of_range(action):
        code = module.main([*base, f"{flag}={value}"])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert code == 2, f"{command} {flag}={value} exited {code}: {err}"
        assert len(errors) == 1 and "Traceback" not in err, err
        assert flag.lstrip("-").replace("-", "_") in errors[0].replace("-", "_"), errors[0]
        assert not (tmp_path / "run").exists(), "a refused run left a run directory"


def test_a_huge_beam_names_the_page_range(nothing_loads, capsys):
    """The issue's own command: --beam 100000 is refused at once, naming 1..16."""
    from core.translate import main

    for beam in ("100000", "0", "-3"):
        assert main(["--checkpoint", "checkpoints/fra-eng-small.pt", "--beam", beam, "hi"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"error: argument --beam: must be a whole number from {BEAM_SIZES[0]} to "
            f"{BEAM_SIZES[1]} (got {beam})"
        )


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("16", 16), ("mean", "mean")],
)
def test_in_range_takes_what_the_range_holds(text, value):
    """Values inside the range, and the words, pass unchanged."""
    assert InRange(int, 1, 16, words=(("mean", "mean"),))(text) == value


@pytest.mark.parametrize("text", ["0", "17", "nan", "1.5", "", "9" * 5000])
def test_in_range_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError, match="a whole number from 1 to 16"):
        InRange(int, 1, 16)(text)


@pytest.mark.parametrize("text", ["0", "-1", "1.0000001", "nan", "inf"])
def test_a_share_above_zero(text):
    """``above``: the least is refused too; NaN never passes a comparison."""
    assert InRange(float, 0, 1, above=True)("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match="above 0, at most 1"):
        InRange(float, 0, 1, above=True)(text)
    assert not math.isnan(InRange(float, 0, 1, above=True)("0.5"))


@pytest.mark.skipif(not SHIPPED.is_file(), reason="the shipped model is not trained yet")
def test_a_target_language_the_model_cannot_use_is_refused(hf_models):
    """Issue 72: ``--target-lang __de__`` on the English->French model was ignored without a
    word; a model of one language refuses it in one line, a multilingual one takes its own
    codes (and translates into them) and refuses any other."""
    parser = CommandParser()
    add_decode_flags(parser, GREEDY, (BEAM_SIZES, ALPHAS, MAX_LENS))
    german, unknown = parser.parse_args(["--target-lang", "__de__"]), parser.parse_args([])
    small = core.model.opened.open_model(str(SHIPPED))
    with pytest.raises(CommandError, match="^--target-lang __de__: this model writes one lang"):
        decode_settings(german, GREEDY, small)
    assert decode_settings(unknown, GREEDY, small) == GREEDY
    assert decode_settings(unknown, GREEDY, None) == GREEDY
    m2m = core.model.opened.open_model(str(hf_models["m2m_100"]))
    settings = decode_settings(german, GREEDY, m2m)
    assert settings.target_lang == "__de__"
    assert translate_sentence(m2m, "hello", settings).output_tokens is not None
    unknown.target_lang = "__xx__"
    with pytest.raises(CommandError, match="not one of this model's language codes: __de__, __en"):
        decode_settings(unknown, GREEDY, m2m)


TARGET_LANG_COMMANDS = {  # every command taking --target-lang: the rest of a valid call
    "translate": ["hi"],
    "attribute": ["hi"],
    "inside_head": ["--sentence", "hi"],
    "logit_attribution": ["--source", "hi"],
    "head_scores": ["--head-stats", "--sentence", "hi", "--kind", "cross"],
    "ablate": ["--heads", "cross:1:0", "--sentence", "hi"],
    "patch": ["--clean", "the boy is tall .", "--corrupt", "the girl is tall ."],
    "evaluate": ["--max-sentences", "2"],
    "project": ["--sentences", "2"],
}


@pytest.mark.skipif(not SHIPPED.is_file(), reason="the shipped model is not trained yet")
@pytest.mark.parametrize("name", sorted(TARGET_LANG_COMMANDS))
def test_every_command_refuses_a_target_language_a_one_language_model_cannot_use(
    name, tmp_path, monkeypatch, capsys
):
    """Each command that takes ``--target-lang`` refuses one the English->French model cannot
    use, in one line with exit code 2 and nothing printed (it was ignored without a word)."""
    import importlib

    from tests.helpers import fra_eng_like

    monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))  # evaluate, project
    command = importlib.import_module(f"core.{name}")
    argv = ["--checkpoint", str(SHIPPED), "--target-lang", "__de__", *TARGET_LANG_COMMANDS[name]]
    assert command.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "writes one language" in err, err


def test_the_target_language_list_names_every_command_that_takes_the_flag():
    """TARGET_LANG_COMMANDS above holds every command whose --help has --target-lang."""
    import importlib

    from tests.helpers import ROOT

    taking = set()
    for path in sorted((ROOT / "core").glob("*.py")):
        module = importlib.import_module(f"core.{path.stem}")
        parser = getattr(module, "build_parser", None)
        if parser is not None and "--target-lang" in parser().format_help():
            taking.add(path.stem)
    assert taking == set(TARGET_LANG_COMMANDS)
