"""The commands' one main: parse the flags, check them, run, print.

Every ``python -m core.<command>`` is a module at the top of ``core`` whose ``main`` calls
``run_command(parser, run, errors, argv)``: ``run(args)`` does the work through the library
and returns the lines to print (or an exit code, for the trainer). An error a user can fix
(``CommandError``, or one of the command's ``errors``) is one line on stderr, ``error: ...``,
and exit code 2; anything else is a bug and shows its traceback. A flag's value is checked as
its parser reads it (``CommandParser``; a number by ``InRange``, the range a page offers), so a
refused value costs no model load.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import NoReturn

from tqdm import tqdm

from core.cpu_load import command_threads

USAGE_ERROR = 2  # exit code of a command given something it cannot use
INDICES = (0, 4095)  # a layer, head or position a flag names (the open model checks its own)


class CommandError(Exception):
    """What a command was given cannot be used; the message says what to give instead."""


# what a terminal or a line reader takes for the end of a line or a control sequence: C0 and
# C1 controls (U+009B is a terminal's CSI, U+0085 a line end), U+2028 and U+2029
UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def terminal_safe(text: str) -> str:
    """``text`` with every UNPRINTABLE character written as its JSON escape (\\uXXXX): a JSON
    line stays one line with the same value, and typed text reaches the terminal as data."""
    return UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def one_line(error: BaseException) -> str:
    """An error's message on one line, terminal-safe."""
    return terminal_safe(" ".join(str(error).split()))


class CommandParser(argparse.ArgumentParser):
    """The commands' argument parser: a flag it refuses is one line, ``error: ...``, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``error: <message>`` alone (``--help`` shows the usage) and exit with 2."""
        self.exit(USAGE_ERROR, f"error: {one_line(message)}\n")

    def add_argument(self, *args, **kwargs):
        """argparse's, with a number's range (an ``InRange`` type) added to its help."""
        if isinstance(kind := kwargs.get("type"), InRange):
            kwargs["help"] = "; ".join(filter(None, [kwargs.get("help"), kind.described()]))
        return super().add_argument(*args, **kwargs)


@dataclass(frozen=True)
class InRange:
    """A flag's ``type``: a finite number of ``kind`` (int or float) from ``least`` to ``most``
    (the range a page offers, imported from where it is written), or one of the ``words``;
    anything else is refused in one line that names the range."""

    kind: type  # int or float
    least: float
    most: float
    above: bool = False  # True: ``least`` itself is refused (a share or a size above 0)
    words: tuple = ()  # (word, value) pairs also taken, e.g. ("mean", "mean")

    def __call__(self, text: str):
        """The value of ``text``; argparse.ArgumentTypeError naming the range."""
        if text in dict(self.words):
            return dict(self.words)[text]
        try:
            value = self.kind(text)
        except ValueError:  # not a number (or an int's "nan", "1.5", 5,000 digits)
            value = None
        if value is None or not (math.isfinite(value) and self.holds(value)):
            raise argparse.ArgumentTypeError(f"must be {self.described()} (got {text})")
        return value

    @classmethod
    def index(cls, *words: str) -> InRange:
        """A layer, head or position counted from 0 (``INDICES``), or one of ``words``."""
        return cls(int, *INDICES, words=tuple((w, w) for w in words))

    def holds(self, value) -> bool:
        """Whether ``value`` is in the range."""
        return (value > self.least if self.above else value >= self.least) and value <= self.most

    def described(self) -> str:
        """The range in words: 'a whole number from 1 to 16', 'a number above 0, at most 1'."""
        show = (lambda x: f"{x:,}") if self.kind is int else (lambda x: f"{x:g}")
        low = f"above {show(self.least)}, at most" if self.above else f"from {show(self.least)} to"
        words = "".join(f" or {w!r}" for w, _ in self.words)
        return (
            f"{'a whole number' if self.kind is int else 'a number'} {low} {show(self.most)}{words}"
        )


def add_model_flag(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint``: the model a command opens (``core.model.opened.open_model``)."""
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a studio checkpoint (.pt), a Hugging Face model folder or hub id",
    )


def add_prompt_flag(parser: argparse.ArgumentParser) -> None:
    """``--prompt``: a decoder-only model's prompt template (core.model.prompt)."""
    parser.add_argument(
        "--prompt",
        default="",
        help="a decoder-only model's prompt template, with {src} where the sentence goes "
        "(default: 'English: {src}\\nFrench:')",
    )


def add_decode_flags(parser: argparse.ArgumentParser, defaults, ranges: tuple) -> None:
    """``--beam``, ``--alpha``, ``--max-len`` and ``--target-lang``: the decoding settings a
    page builds (``ViewState.settings``). ``defaults``: the DecodeSettings whose values are the
    flags' defaults (``core.model.parts.GREEDY``); ``ranges``: the (least, most) of the beam
    sizes, length penalties and longest outputs a page offers (``BEAM_SIZES``, ``ALPHAS``,
    ``MAX_LENS``), passed in because the model's modules sit above this one."""
    beams, alphas, longest = (InRange(kind, *r) for kind, r in zip((int, float, int), ranges))
    parser.add_argument(
        "--beam", type=beams, default=defaults.beam_size, help="beam size (1 = greedy)"
    )
    parser.add_argument(
        "--alpha", type=alphas, default=defaults.alpha, help="beam search's length penalty"
    )
    parser.add_argument(
        "--max-len", type=longest, default=defaults.max_len, help="longest output, in tokens"
    )
    parser.add_argument(
        "--target-lang",
        default=defaults.target_lang,
        help="a multilingual model's target language code (M2M100 __fr__, NLLB fra_Latn)",
    )


def decode_settings(args: argparse.Namespace, defaults, model):
    """``defaults`` (a DecodeSettings) with the values of ``add_decode_flags``'s flags, and of
    ``--prompt`` where the command has one: the settings a page builds from the same values.
    A ``--target-lang`` the open ``model`` cannot use is a CommandError (``usable_target_lang``;
    ``model`` None: the flags read before a model is open, nothing checked)."""
    if model is not None:
        usable_target_lang(args.target_lang, model)
    return replace(
        defaults,
        beam_size=args.beam,
        alpha=args.alpha,
        max_len=args.max_len,
        target_lang=args.target_lang,
        prompt=getattr(args, "prompt", defaults.prompt),
    )


def usable_target_lang(code: str, model) -> str | None:
    """A ``--target-lang`` as the library takes it (None: none given); CommandError when
    ``model`` cannot write in that language (``target_lang_problem``)."""
    if problem := target_lang_problem(code, model):
        raise CommandError(problem)
    return code or None


def target_lang_problem(code: str, model) -> str | None:
    """Why ``model`` cannot write in language ``code`` (a ``--target-lang``), in one line; None
    when it can or no code is given. A model of one target language takes none: the page shows
    it no Target language box (and drops a link's with a note), so no command it prints has
    the flag."""
    codes = model.language_codes()
    if not code or code in codes:
        return None
    if not codes:
        return (
            f"--target-lang {code}: this model writes one language and takes no target "
            "language code; leave --target-lang out"
        )
    shown = ", ".join(codes[:20]) + (", ..." if len(codes) > 20 else "")
    return f"--target-lang {code} is not one of this model's language codes: {shown}"


def decode_flag_words(settings, defaults) -> str:
    """The flags of ``add_decode_flags`` (and ``--prompt``) that give ``settings`` where they
    differ from ``defaults``, shell-quoted: what a page's "prints the same" command adds."""
    flags = (
        ("--beam", settings.beam_size, defaults.beam_size),
        ("--alpha", settings.alpha, defaults.alpha),
        ("--max-len", settings.max_len, defaults.max_len),
        ("--target-lang", settings.target_lang, defaults.target_lang),
        ("--prompt", settings.prompt, defaults.prompt),
    )
    return " ".join(f"{flag} {shell_word(str(v))}" for flag, v, default in flags if v != default)


def shell_word(text: str) -> str:
    """``text`` as one shell word: quoted as ``shlex.quote`` does, or, holding a line end or
    a tab (a prompt template's), in bash's $'...' with them written as \\n and \\t."""
    if not any(ch in text for ch in "\n\r\t"):
        return shlex.quote(text)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + "'"


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
    try:
        args = parser.parse_args(argv)  # a refused flag: one line already printed
    except SystemExit as e:  # --help (0), or a value CommandParser refused (2)
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    if share_cores and (note := command_threads()):  # the app's policy on a busy machine
        print(note, file=sys.stderr)
    try:
        out = run(args)
        if isinstance(out, int):
            return out
        for line in out:
            print(terminal_safe(line), flush=True)
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
