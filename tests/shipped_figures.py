"""Every figure the studio computes of its shipped models, captured through the commands
(their JSON lines are the public contract) and the translation the pages show.

``python -m tests.shipped_figures`` writes ``tests/data/shipped_figures.json``: it was run on
the code before the one-interface change (issue 48) and is run again by
``tests/test_shipped_figures.py`` on the code as it is, which compares every number. Figures
that read validation sentences need the real corpus (``FRA_ENG_ZIP``); without it those cases
are skipped. Caches are written into a temporary runs folder, so nothing is read back.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAIN = "checkpoints/fra-eng-small.pt"
ALIGNED = "checkpoints/fra-eng-small-aligned.pt"
GOLD = ["--data", "core/alignment/gold/studio.src-tgt", "--gold", "core/alignment/gold/studio.gold"]
OUT = REPO / "tests" / "data" / "shipped_figures.json"
SENTENCES = ("We are late for the train.", "The boy is taller than his sister.")
CORPUS = ["--data", "fra-eng"]
METHODS = ("attention", "rollout", "norm", "alti", "value-zeroing", "grad-input")


def _attribute_cases() -> dict[str, tuple[str, list[str], bool]]:
    cases = {}
    for i, sentence in enumerate(SENTENCES):
        for m in (*METHODS, "integrated-gradients"):
            cases[f"attribute {m} {i}"] = ("attribute", ["--method", m, sentence], False)
    cases["attribute attention 1:2"] = (
        "attribute",
        ["--method", "attention", "--layer", "1", "--head", "2", SENTENCES[0]],
        False,
    )
    cases["attribute target"] = (
        "attribute",
        ["--method", "alti", "--target", "nous sommes en retard pour le train .", SENTENCES[0]],
        False,
    )
    for m in ("grad-input", "integrated-gradients", "occlusion"):
        cases[f"contrast {m}"] = (
            "attribute",
            ["--method", m, "--contrast", "nous sommes en retard pour le bus .", SENTENCES[0]],
            False,
        )
    cases["faithfulness"] = (
        "attribute",
        ["--faithfulness", "--sentences", "12", *CORPUS],
        True,
    )
    return cases


def cases() -> dict[str, tuple[str, list[str], bool]]:
    """name -> (command, flags after --checkpoint PLAIN, needs the corpus)."""
    out = {
        "translate": ("translate", ["--beam", "4", *SENTENCES], False),
        "translate ablated": (
            "translate",
            ["--ablate", "cross:1:0,encoder:0:2", SENTENCES[0]],
            False,
        ),
        **_attribute_cases(),
        "align gold": ("align", [*GOLD, "--method", "alti"], False),
        "align supervision": (
            "align",
            ["--checkpoint", ALIGNED, *GOLD, "--compare-with", PLAIN],
            False,
        ),
        "patch": (
            "patch",
            ["--clean", "the boy is tall .", "--corrupt", "the girl is tall ."],
            False,
        ),
        "patch noise": (
            "patch",
            [
                *("--clean", "the boy is tall .", "--corrupt", "the girl is tall ."),
                *("--direction", "noise", "--prefix", "le", "--answers", "garçon", "fille"),
            ],
            False,
        ),
        "lens": ("inside_head", ["--sentence", SENTENCES[0], "--logit-lens"], False),
        "ablate": ("ablate", ["--sentences", "12", "--refresh", *CORPUS], True),
        "project encoder": ("project", ["--sentences", "6", "--layer", "all", *CORPUS], True),
        "project decoder": (
            "project",
            ["--side", "decoder", "--sentences", "6", "--layer", "2", *CORPUS],
            True,
        ),
        "trajectories": ("trajectories", ["--sentences", "6"], True),
    }
    for kind, query in (("encoder", 2), ("decoder_self", 3), ("cross", 1)):
        out[f"inside {kind}"] = (
            "inside_head",
            [
                *("--sentence", SENTENCES[1], "--kind", kind),
                *("--layer", "1", "--head", "2", "--query", str(query)),
            ],
            False,
        )
    return out


def run_case(command: str, flags: list[str]) -> list:
    """The command's printed lines, parsed (JSON where a line is, else the text)."""
    argv = flags if "--checkpoint" in flags else ["--checkpoint", PLAIN, *flags]
    module = importlib.import_module(f"core.{command}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = module.main(argv)
    if code:
        raise RuntimeError(f"{command} {argv} exited with {code}")
    lines = []
    for line in out.getvalue().splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            lines.append(line)
    return lines


def maps_of_translations() -> dict:
    """The maps, tokens and probabilities the Translate and Attention pages show."""
    from core.model.checked_translation import translate_sentence
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings

    out = {}
    lm = open_model(PLAIN)
    for i, sentence in enumerate(SENTENCES):
        for beam in (1, 3):
            t = translate_sentence(lm, sentence, DecodeSettings(beam_size=beam))
            out[f"{i} beam {beam}"] = {
                "tokens": t.tokens,
                "src": t.src_tokens,
                "topk": t.topk,
                "log_prob": t.log_prob,
                "maps": [
                    m.float().numpy().round(6).tolist()
                    for m in (t.attention.encoder, t.attention.decoder_self, t.attention.cross)
                ],
            }
    return out


def dropped_timings(value):
    """The value without wall-clock figures (seconds, cached flags, speeds)."""
    if isinstance(value, dict):
        return {
            k: dropped_timings(v)
            for k, v in value.items()
            if k not in ("seconds", "cached", "sentences_per_s")
        }
    if isinstance(value, list):
        return [dropped_timings(v) for v in value]
    return value


def capture(names=None) -> dict:
    """name -> the figures of each case (those needing the corpus only with FRA_ENG_ZIP)."""
    have_corpus = bool(os.environ.get("FRA_ENG_ZIP"))
    result = {}
    with tempfile.TemporaryDirectory() as runs:
        old = os.environ.get("ATTENTION_STUDIO_RUNS")
        os.environ["ATTENTION_STUDIO_RUNS"] = runs
        try:
            for name, (command, flags, corpus) in cases().items():
                if (names is None or name in names) and (have_corpus or not corpus):
                    result[name] = dropped_timings(run_case(command, flags))
            if names is None or "maps" in names:
                result["maps"] = json.loads(json.dumps(maps_of_translations()))
        finally:
            if old is None:
                os.environ.pop("ATTENTION_STUDIO_RUNS")
            else:
                os.environ["ATTENTION_STUDIO_RUNS"] = old
    return result


def differences(before, after, where: str = "", tol: float = 1e-4) -> list[str]:
    """Where two captured values differ: numbers beyond ``tol`` (absolute, or relative for
    large numbers), anything else when not equal. A key the code added since (a new field,
    such as the attribution command's ``step_scores``) is not a difference; a key gone is."""
    if isinstance(before, dict) and isinstance(after, dict):
        if gone := set(before) - set(after):
            return [f"{where}: keys gone {sorted(gone)}"]
        return [d for k in before for d in differences(before[k], after[k], f"{where}.{k}", tol)]
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"{where}: length {len(before)} != {len(after)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(before, after))
            for d in differences(a, b, f"{where}[{i}]", tol)
        ]
    numbers = (int, float)
    if isinstance(before, numbers) and isinstance(after, numbers) and not isinstance(before, bool):
        if math.isnan(before) and math.isnan(after):
            return []
        if abs(before - after) <= tol * max(1.0, abs(before)):
            return []
        return [f"{where}: {before} != {after}"]
    return [] if before == after else [f"{where}: {before!r} != {after!r}"]


if __name__ == "__main__":
    os.chdir(REPO)
    import torch

    torch.set_num_threads(1)
    figures = capture(sys.argv[1:] or None)
    OUT.write_text(json.dumps(figures, ensure_ascii=False, separators=(",", ":")))
    print(f"{OUT.relative_to(REPO)}: {len(figures)} cases, {OUT.stat().st_size:,} bytes")
