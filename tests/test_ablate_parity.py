"""``python -m core.ablate`` prints what the Attention page's "Remove heads" section draws:
the pruning curve of head importance (the baseline line's ``pruning``) and, for a model that
reads sentences, the translation's text and log-probability with and without the heads
(``--heads H --sentence S``), each from the library function the page calls."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from core import ablate as ablate_cmd
from core.attention.ablation import sentence_removed
from core.attention.importance import lookup_importance, model_facts
from core.model.checked_translation import DEFAULT_SENTENCE
from core.model.checkpoints import atomic_save, read_checkpoint
from core.model.opened import open_model
from core.model.parts import ALPHA, DecodeSettings
from core.runs.catalogue import SHIPPED_NAME
from pages.ui.view_state import ViewState
from tests.helpers import ROOT, VAL_DATA, assert_clean, run_page_script

CROSS = [f"Cross L{layer} H{head}" for layer in range(2) for head in range(4)]
CROSS_SPEC = ",".join(f"cross:{layer}:{head}" for layer in range(2) for head in range(4))


@pytest.fixture
def shipped(studio_dirs):
    """The app's shipped model (the tiny one), its data settings holding 6 validation pairs."""
    path = studio_dirs["checkpoints"] / SHIPPED_NAME
    ckpt = read_checkpoint(path)
    ckpt["data_config"] = dict(VAL_DATA)
    atomic_save(ckpt, path)
    return path


def command_lines(capsys, *argv: str) -> list[dict]:
    """The command's JSON lines (it must succeed)."""
    assert ablate_cmd.main(list(argv)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def array(values) -> np.ndarray:
    """A Plotly array as numpy (Plotly may encode arrays as typed binary data)."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
    return np.asarray(values, dtype=np.float32)


def test_the_command_prints_the_pruning_curve_the_page_draws(shipped, capsys):
    at = run_page_script("attention.py", {"section": "Remove heads"})
    at = at.button(key="ab_compute").click().run()
    assert_clean(at)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    curve = next(s for s in specs if s["layout"]["title"]["text"].startswith("Pruning curve"))
    n = ViewState().importance_sentences  # the page's sample size
    base = command_lines(capsys, "--checkpoint", str(shipped), "--sentences", str(n))[0]
    lm = open_model(str(shipped))
    drawn = lookup_importance(shipped, lm.meta, n, None, "float32", model_facts(lm))
    assert base["cached"] and drawn is not None  # the page's result, as the page reads it
    assert base["pruning"] == drawn.pruning
    assert len(base["pruning"]) == 2 * 4 * 3 + 1 and base["pruning"][0]["removed"] == 0
    x = np.asarray([p["fraction"] for p in base["pruning"]], dtype=np.float32)
    y = np.asarray([p["bleu"] for p in base["pruning"]], dtype=np.float32)
    np.testing.assert_array_equal(array(curve["data"][0]["x"]), x)
    np.testing.assert_array_equal(array(curve["data"][0]["y"]), y)


def test_the_command_translates_a_sentence_with_and_without_heads(shipped, capsys):
    rows = command_lines(
        capsys, "--checkpoint", str(shipped), "--heads", CROSS_SPEC, "--sentence", DEFAULT_SENTENCE
    )
    lm = open_model(str(shipped))
    assert rows == sentence_removed(lm, CROSS_SPEC, DEFAULT_SENTENCE)
    original, removed = rows
    assert original["heads"] == "" and removed["heads"] == CROSS_SPEC
    assert original["text"] == "je suis chez moi ." and removed["text"] != original["text"]
    assert original["change"] is None
    assert removed["change"] == pytest.approx(removed["log_prob"] - original["log_prob"])
    at = run_page_script("attention.py", {"section": "Remove heads"})
    at = at.multiselect(key="ab_heads").set_value(CROSS).run()
    assert_clean(at)
    shown = [(m.value, m.delta or None) for m in at.metric if m.label == "log-probability"]
    assert shown == [
        (f"{original['log_prob']:.2f}", None),
        (f"{removed['log_prob']:.2f}", f"{removed['change']:+.2f}"),
    ]
    assert any(f"--heads {CROSS_SPEC} --sentence" in c.value for c in at.caption)


def test_the_decoding_flags_reach_the_library(val_checkpoint, capsys):
    flags = ["--heads", "cross:1:0", "--sentence", "go .", "--beam", "3", "--max-len", "4"]
    rows = command_lines(capsys, "--checkpoint", str(val_checkpoint), *flags)
    lm = open_model(str(val_checkpoint))
    assert rows == sentence_removed(lm, "cross:1:0", "go .", DecodeSettings(3, ALPHA, 4))


def test_a_token_sequence_model_takes_no_sentence(capsys):
    argv = ["--checkpoint", str(ROOT / "checkpoints" / "induction-2l.hf")]
    assert ablate_cmd.main([*argv, "--heads", "decoder_self:0:0", "--sentence", "t1 t2"]) == 2
    err = capsys.readouterr().err
    assert "reads a token sequence (--sequence)" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sentence", "i'm home ."], "give --heads"),
        (["--heads", "cross:0:0"], "need a sentence (--sentence TEXT)"),
        (["--heads", "cross:0:0", "--sentence", "x", "--sequence", "t1"], "reads sentences"),
        (["--heads", "cross:9:0", "--sentence", "i'm home ."], "2 decoder layers"),
        (["--heads", "cross:0:0", "--sentence", "x", "--beam", "0"], "from 1 to 16"),
    ],
)
def test_the_sentence_flags_refuse_in_one_line(val_checkpoint, capsys, extra, message):
    assert ablate_cmd.main(["--checkpoint", str(val_checkpoint), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_the_page_names_the_command_with_its_decoding(shipped, studio_dirs, capsys, monkeypatch):
    """With beam search on the page, the command the caption names (its --beam, --max-len)
    prints the figures the cards show; greedy decoding would not."""
    import shlex

    monkeypatch.chdir(studio_dirs["checkpoints"].parent)  # where the page's model path starts
    at = run_page_script("attention.py", {"section": "Remove heads", "beam": "3", "max_len": "7"})
    at = at.multiselect(key="ab_heads").set_value(CROSS).run()
    assert_clean(at)
    said = next(c.value for c in at.caption if "python -m core.ablate" in c.value)
    argv = shlex.split(said[said.index("python") : said.index("--sentence TEXT")])[3:]
    assert "--beam" in argv and "--max-len" in argv and "--alpha" not in argv
    rows = command_lines(capsys, *argv, "--sentence", DEFAULT_SENTENCE)
    shown = [(m.value, m.delta or None) for m in at.metric if m.label == "log-probability"]
    original, removed = rows
    assert shown == [
        (f"{original['log_prob']:.2f}", None),
        (f"{removed['log_prob']:.2f}", f"{removed['change']:+.2f}"),
    ]
    greedy = command_lines(capsys, "--checkpoint", str(shipped), "--heads", CROSS_SPEC,
                           "--sentence", DEFAULT_SENTENCE)  # fmt: skip
    assert greedy != rows  # the decoding matters here


def test_the_named_flags_are_shell_words_the_shell_gives_back():
    """A page's command names its decoding as flags a shell reads back as they were: a
    prompt template's new line and quotes included (bash's $'...')."""
    import shlex
    import subprocess

    from core.command_line import decode_flag_words
    from core.model.parts import GREEDY

    prompt = "English: {src}\nFrench: 'it' \\ \"so\"\t"
    words = decode_flag_words(DecodeSettings(4, 1.0, 20, prompt=prompt), GREEDY)
    assert shlex.split(words.replace(words[words.index("$'") :], ""))[:6] == [
        "--beam", "4", "--alpha", "1.0", "--max-len", "20",
    ]  # fmt: skip
    said = subprocess.run(
        ["bash", "-c", f'for w in {words}; do printf "%s\\0" "$w"; done'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert said.split("\0")[:-1] == ["--beam", "4", "--alpha", "1.0", "--max-len", "20",
                                      "--prompt", prompt]  # fmt: skip
    assert decode_flag_words(GREEDY, GREEDY) == ""
