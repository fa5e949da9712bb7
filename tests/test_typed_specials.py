"""A model's own padding token typed as text, and a sentence the tokenizer reads as nothing
(the audit of 30 November 2026): a one-sequence model's padded rows end where their padding
starts, so a typed ``<pad>`` (the shipped decoder's) or ``<|endoftext|>`` (GPT-2's padding)
at the end of a translation cut its row one token short, and a typed ``[PAD]`` vanished from a
masked model's pass while its token lists kept it: the Attention and Translate pages fell on
an exception and six commands on a traceback. Each is now refused in one line. Also: a prompt
template that leaves the sentence too few positions says so; a model that reads a token
sequence refuses a sentence to translate."""

from __future__ import annotations

import shutil

import pytest

from core import attribute, inside_head, logit_attribution, patch, translate
from core.model.opened import open_model
from core.model.parts import DEFAULT_TEMPLATE, GREEDY, TranslationError
from tests.helpers import ROOT, assert_clean, plain, run_page_script

DECODER = ROOT / "checkpoints" / "fra-eng-decoder.hf"  # the shipped decoder-only translator
INDUCTION = ROOT / "checkpoints" / "induction-2l.hf"


def one_line_refusal(capsys, main, argv, words: str) -> None:
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note:")]
    assert len(err) == 1 and words in err[0], err


PADDED = [  # (command, argv after --checkpoint FOLDER) on the shipped decoder
    (translate.main, ["--json", "--target", "je suis <pad>", "i am cold ."]),
    (translate.main, ["--target", "<pad>", "i am cold ."]),
    (attribute.main, ["--contrast", "je suis <pad>", "i am cold ."]),
    (logit_attribution.main, ["--source", "i am cold .", "--prefix", "je <pad>"]),
    (
        patch.main,
        ["--clean", "the boy is tall .", "--corrupt", "the girl is tall .", "--prefix", "le <pad>"],
    ),  # fmt: skip
]


@pytest.mark.parametrize("main,argv", PADDED, ids=lambda x: getattr(x, "__module__", ""))
def test_the_shipped_decoders_padding_typed_in_a_translation_is_refused(capsys, main, argv):
    one_line_refusal(
        capsys, main, ["--checkpoint", str(DECODER), *argv], "<pad>, the model's padding"
    )


def test_gpt2s_end_of_text_typed_in_a_translation_is_refused(capsys, lm_models):
    """GPT-2's tokenizer has no padding token: the studio pads with <|endoftext|>."""
    gpt2 = ["--checkpoint", str(lm_models["gpt2"])]
    for main, argv in [
        (translate.main, ["--json", "--target", "bon <|endoftext|>", "the boy"]),
        (attribute.main, ["--method", "alti", "--target", "<|endoftext|>", "the boy"]),
        (inside_head.main, ["--sentence", "the boy", "--target", "bon <|endoftext|>",
                            "--logit-lens"]),
    ]:  # fmt: skip
        one_line_refusal(capsys, main, gpt2 + argv, "<|endoftext|>, the model's padding token")
    lm = open_model(str(lm_models["gpt2"]))
    assert lm.force("the boy", "bon", GREEDY).out_ids  # the same without it: rated


def test_a_typed_pad_in_a_masked_models_sentence_is_refused(capsys, lm_models):
    bert = ["--checkpoint", str(lm_models["bert"])]
    for main, argv in [
        (attribute.main, ["--method", "alti", "the [MASK] [PAD] ."]),
        (attribute.main, ["--method", "grad-input", "the boy [PAD] ."]),
        (inside_head.main, ["--sentence", "the boy [PAD] .", "--logit-lens"]),
        (logit_attribution.main, ["--source", "the boy [PAD] ."]),
    ]:
        one_line_refusal(capsys, main, bert + argv, "[PAD], the model's padding token")
    lm = open_model(str(lm_models["bert"]))
    for nothing in ("\u200b", "\x00", "\x1b\x07", "   "):  # read as no token: empty, as spaces are
        with pytest.raises(TranslationError, match="The sentence is empty"):
            lm.source(nothing)
    assert lm.source("the [MASK] .").ids  # a mask is a token a sentence may hold


def test_a_template_that_leaves_the_sentence_few_positions_says_so(lm_models):
    """The tiny GPT-2 has 128 positions; a long template left "the boy is tall ." read as "the
    boy is" with no word (the promise: "only the first N were used")."""
    template = "Please translate the following English sentence into good, natural French " * 2
    lm = open_model(str(lm_models["gpt2"]), prompt=template + ": {src}\nFrench translation:")
    src = lm.source("the boy is tall .")
    assert any("only the first" in n for n in src.notes), src.notes
    assert not open_model(str(lm_models["gpt2"]), prompt=DEFAULT_TEMPLATE).source("the boy").notes


def test_the_pages_say_the_padding_in_one_line(studio_dirs):
    shutil.copytree(DECODER, studio_dirs["checkpoints"] / DECODER.name)
    query = {"model": "checkpoints/fra-eng-decoder.hf/", "sentence": "i am cold ."}
    for page in ("attention.py", "translate.py"):
        at = run_page_script(page, query | {"target": "je suis <pad>"})
        assert_clean(at)  # it fell on an exception before any section was drawn
        assert any("the model's padding token" in plain(e.value) for e in at.error)


def test_a_sequence_model_refuses_a_sentence_to_translate(capsys):
    """It printed fifty t45 and exit 0 (the page reads the box as the sequence)."""
    for argv in (["I'm home."], ["--json", "I'm home."]):
        one_line_refusal(
            capsys, translate.main, ["--checkpoint", str(INDUCTION), *argv], "--target SEQ ''"
        )
    assert (
        translate.main(["--checkpoint", str(INDUCTION), "--target", "t3 t7 t9 t3 t7 t9", ""]) == 0
    )
