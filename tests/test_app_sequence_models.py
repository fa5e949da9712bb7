"""AppTests of the Attention page for models that read a token sequence, not a sentence: the
shipped induction model shows no prompt template and no translation line, but the sequence its
training scored its heads on, read in one pass whose maps are the model's own attention; and
"Over training" of a run without BLEU (a tiny seeded induction run, an encoder run) shows the
figures the run measured and calls its probe what it is."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from core.attention.snapshots import probe_sentences
from core.model.opened import open_model
from core.runs.circuit_history import circuit_evals
from core.runs.run_dir import RunDir
from tests import helpers
from tests.helpers import ROOT, assert_clean, plain, run_page_script
from tests.test_app_attention import json_z
from tests.test_one_stack_replay import one_stack_runs  # noqa: F401 - the module's fixture

SHIPPED = ROOT / "checkpoints" / "induction-2l.hf"
HISTORY = ROOT / "checkpoints" / "induction-2l.history"


@pytest.fixture
def studio_folders(tmp_path, monkeypatch) -> dict:
    """checkpoints/ with the shipped induction model and its history; runs/ empty."""
    dirs = helpers.empty_studio_dirs(tmp_path, monkeypatch)
    shutil.copytree(SHIPPED, dirs["checkpoints"] / SHIPPED.name)
    shutil.copy(HISTORY, dirs["checkpoints"] / HISTORY.name)
    return dirs


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def attention_page(model: str, section: str, **query):
    at = run_page_script("attention.py", {"model": model, "section": section, **query})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    return at


def test_the_induction_model_reads_its_token_sequence_not_a_prompt(studio_folders):
    at = attention_page(f"checkpoints/{SHIPPED.name}/", "maps")
    assert not at.text_area, [t.label for t in at.text_area]  # no prompt template
    assert "Translation (" not in texts(at) and "Your translation" not in texts(at)
    box = at.text_input(key="at_sentence")
    lm = open_model(str(SHIPPED))
    (probe,) = probe_sentences(HISTORY)  # the sequence its training scored its heads on
    assert box.label == "Token sequence" and box.value == probe
    assert f"**Sequence read:** <bos> {probe}" in texts(at)
    assert "16 of the 16 of its repeat" in texts(at)  # it copies the whole repeat
    assert not [w for w in at.warning if "reads no sentence" in w.value]  # said once, above
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "layer 0, head 0" in chart["layout"]["title"]["text"]
    ids = [lm.start_id, *lm.target_ids(probe)[:-1]]  # its start token, then the sequence
    with torch.no_grad():
        out = lm.model(input_ids=torch.tensor([ids]), output_attentions=True)
    own = out.attentions[0][0, 0]  # layer 0, head 0: (N, N)
    drawn = torch.tensor(json_z(chart["data"][0]["z"]), dtype=torch.float32)
    assert drawn.shape == own.shape
    assert torch.allclose(drawn, own, atol=1e-3)


def test_a_sequence_with_a_token_the_model_does_not_know_is_said_in_one_line(studio_folders):
    at = attention_page(f"checkpoints/{SHIPPED.name}/", "maps", sentence="t1 t2 hello t1 t2")
    (warning,) = [w for w in at.warning if "vocabulary" in w.value]
    assert plain(warning.value).startswith("1 of the tokens typed is not in this model's")
    assert plain(warning.value).endswith("Its tokens are t0 … t255.")  # from its vocabulary


def metric_labels(at) -> list[str]:
    return [m.label for m in at.metric]


@pytest.fixture
def one_stack_folders(one_stack_runs, tmp_path, monkeypatch) -> dict:  # noqa: F811
    """runs/ holding the tiny seeded induction and encoder runs."""
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(runs))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path))
    for name, run in one_stack_runs.items():
        shutil.copytree(run, runs / name)
    return {"runs": runs}


def test_over_training_of_an_induction_run_shows_its_induction_score_not_bleu(one_stack_folders):
    at = attention_page("runs/induction/best.pt", "training")
    assert metric_labels(at) == ["Step", "Training loss", "Validation loss", "Best induction score"]
    assert at.selectbox(key="at_probe").label == "Probe sequence"
    step = int(at.metric[0].value.replace(",", ""))
    records = RunDir(one_stack_folders["runs"] / "induction").read_metrics()
    (record,) = [r for r in circuit_evals(records) if r["step"] == step]
    best = max(map(max, record["circuits"]["induction"]))
    assert at.metric[3].value == f"{best:.2f}"


def test_over_training_of_an_encoder_run_shows_no_empty_bleu(one_stack_folders):
    at = attention_page("runs/encoder/best.pt", "training")
    assert "Validation BLEU" not in metric_labels(at)
    assert metric_labels(at)[:3] == ["Step", "Training loss", "Validation loss"]
    assert at.selectbox(key="at_probe").label == "Probe sentence"  # its probes are sentences


def test_translate_reads_the_induction_model_s_sequence_as_the_command_prints_it(
    studio_folders, capsys
):
    """The Translate page once decoded the induction model from its start token whatever
    was typed ("English sentence (read into the prompt)": t45 t45 …, "Stopped at 50
    tokens"). It reads the token sequence in one pass, as the Attention page does, and shows
    each token's probability and rank: what ``core.translate --target SEQ ''`` prints."""
    from core import translate as translate_cmd

    at = run_page_script("translate.py", {"model": f"checkpoints/{SHIPPED.name}/"})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    (probe,) = probe_sentences(HISTORY)
    box = at.text_input(key="tr_sentence")
    assert box.label == "Token sequence" and box.value == probe
    assert not at.radio and not at.toggle and "Stopped at" not in texts(at)  # nothing decoded
    assert "16 of the 16 of its repeat" in texts(at) and "Every map below" not in texts(at)
    argv = ["--checkpoint", str(SHIPPED), "--target", probe, ""]
    assert translate_cmd.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    (table,) = at.dataframe
    assert table.value.to_dict("records") == printed["rows"]
    said = next(c.value for c in at.caption if "python -m core.translate" in c.value)
    assert "--target SEQUENCE ''" in said
    assert translate_cmd.main([*argv[:-1], "hello"]) == 2  # it reads no sentence: said
    assert "no sentence" in capsys.readouterr().err


@pytest.fixture
def with_translator(studio_folders) -> dict:
    """studio_folders, and the shipped English → French model beside the induction model."""
    shutil.copy(ROOT / "checkpoints" / "fra-eng-small.pt", studio_folders["checkpoints"])
    return studio_folders


@pytest.mark.parametrize("page, prefix", [("translate.py", "tr"), ("attention.py", "at")])
def test_switching_from_the_induction_model_shows_the_translator_s_example(
    with_translator, page, prefix
):
    """The induction model's default sequence once stayed in the box after picking a
    translator ("None of these words is in the model's source vocabulary: t172 t55 …"): it
    is what the page put there, as an example sentence is, so each model shows its own."""
    (probe,) = probe_sentences(HISTORY)
    at = run_page_script(page, {"model": f"checkpoints/{SHIPPED.name}/", "section": "maps"})
    box = lambda: at.text_input(key=f"{prefix}_sentence")  # noqa: E731
    assert box().value == probe
    at.selectbox(key=f"{prefix}_model").set_value("checkpoints/fra-eng-small.pt").run()
    assert_clean(at)
    assert box().value == "i'm home ." and box().label == "English sentence"
    assert not at.error, [plain(e.value) for e in at.error]
    at.selectbox(key=f"{prefix}_model").set_value(f"checkpoints/{SHIPPED.name}/").run()
    assert box().value == probe  # back: the default sequence
    box().set_value("t1 t2 t3 t1 t2 t3").run()
    at.run()
    assert box().value == "t1 t2 t3 t1 t2 t3"  # a typed sequence stays typed
    assert not at.error, [plain(e.value) for e in at.error]


@pytest.mark.parametrize("page, prefix", [("translate.py", "tr"), ("attention.py", "at")])
def test_an_emptied_token_box_says_so_and_stays_empty(studio_folders, page, prefix):
    """Clearing the box once refilled it with the default sequence, silently; it now says
    the sequence is empty, as a translator's box says the sentence is, and names the tokens."""
    at = run_page_script(page, {"model": f"checkpoints/{SHIPPED.name}/", "section": "maps"})
    at.text_input(key=f"{prefix}_sentence").set_value("").run()
    assert_clean(at)
    assert at.text_input(key=f"{prefix}_sentence").value == ""
    (error,) = [plain(e.value) for e in at.error]
    assert error == "The token sequence is empty: type a few of its tokens (t0 … t255)."
