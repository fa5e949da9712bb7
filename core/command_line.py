"""The commands' one main: parse the flags, check them, run, print.

Every ``python -m core.<command>`` is a module at the top of ``core`` whose ``main`` calls
``run_command(parser, run, errors, argv)``: ``run(args)`` does the work through the library
and returns the lines to print (or an exit code, for the trainer). An error a user can fix
(``CommandError``, or one of the command's ``errors``) is one line on stderr, ``error: ...``,
and exit code 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from tqdm import tqdm

from core.cpu_load import command_threads

USAGE_ERROR = 2  # exit code of a command given something it cannot use


class CommandError(Exception):
    """What a command was given cannot be used; the message says what to give instead."""


def one_line(error: BaseException) -> str:
    """An error's message on one line."""
    return " ".join(str(error).split())


def add_prompt_flag(parser: argparse.ArgumentParser) -> None:
    """``--prompt``: a decoder-only model's prompt template (core.model.prompt)."""
    parser.add_argument(
        "--prompt",
        default="",
        help="a decoder-only model's prompt template, with {src} where the sentence goes "
        "(default: 'English: {src}\\nFrench:')",
    )


def run_command(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], Iterable[str] | int],
    errors: tuple[type[BaseException], ...] = (),
    argv: list[str] | None = None,
    share_cores: bool = True,
) -> int:
    """Parse ``argv``, call ``run`` and print the lines it returns; the exit code.
    ``share_cores``: one torch thread fewer on a busy machine (``core.cpu_load``); the
    trainer decides its threads itself (its ``threads`` setting, ``core.runs.cpu_share``)."""
    args = parser.parse_args(argv)
    if share_cores and (note := command_threads()):  # the app's policy on a busy machine
        print(note, file=sys.stderr)
    try:
        out = run(args)
        if isinstance(out, int):
            return out
        for line in out:
            print(line, flush=True)
    except (CommandError, *errors) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return USAGE_ERROR
    return 0


def terminal_progress() -> Callable[[float, str], None]:
    """A progress callback (fraction done, what is being done) drawing a bar with the time
    left on a terminal's stderr (nothing when stderr is not a terminal)."""
    bar = tqdm(
        total=1000, disable=not sys.stderr.isatty(), bar_format="{l_bar}{bar}| {remaining} left"
    )

    def report(fraction: float, what: str) -> None:
        bar.set_description(what)
        bar.update(int(fraction * 1000) - bar.n)

    return report
