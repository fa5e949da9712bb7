"""The studio from a notebook (``core.notebook``): its functions give what the commands print
and the figures the pages draw, docs/notebook.md names every one, and docs/notebook.ipynb runs
(in a Jupyter kernel, nbclient: the ``slow`` tier) and ships without outputs."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re

import nbclient
import nbformat
import numpy as np
import pytest
import torch

from core import attribute as attribute_cmd
from core import notebook as studio
from core import patch as patch_cmd
from core import translate as translate_cmd
from core.attention.maps import select_view
from core.attribution.methods import AttributionError
from core.figures import attention as attention_figures
from core.figures import patching as patch_figures
from core.model.parts import TranslationError
from tests.helpers import ROOT, SHIPPED

NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
SENTENCE = "I'm home."
CLEAN, CORRUPT = "the boy is tall .", "the girl is tall ."
PLOTLY = "application/vnd.plotly.v1+json"  # how a Plotly figure shows itself in Jupyter


@pytest.fixture(scope="module")
def shipped():
    """(the shipped model opened by the facade, its translation of SENTENCE)."""
    m = studio.open_model(str(SHIPPED))
    return m, studio.translate(m, SENTENCE)


def printed(capsys, main, argv: list[str]) -> list[str]:
    """The lines a command prints (exit code 0)."""
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def same_json(explained: dict, command: dict) -> bool:
    """The facade's explanation is the command's JSON, but for the step scores (the command
    adds them) and the time each took."""
    leave_out = {"step_scores", "seconds"}
    return {k: v for k, v in explained.items() if k not in leave_out} == {
        k: v for k, v in command.items() if k not in leave_out
    }


def test_translate_is_the_command_s_translation(shipped, capsys):
    m, t = shipped
    out = printed(capsys, translate_cmd.main, ["--checkpoint", str(SHIPPED), SENTENCE])
    assert t.text and out == [t.text]
    beam = studio.translate(m, SENTENCE, beam=4)
    argv = ["--checkpoint", str(SHIPPED), "--beam", "4", SENTENCE]
    assert printed(capsys, translate_cmd.main, argv) == [beam.text]


def test_attribution_and_its_figure_are_the_command_s(shipped, capsys):
    """The facade's explanation is the JSON ``core.attribute`` prints, and its figure draws
    exactly those contributions (later prefix cells blank)."""
    m, t = shipped
    argv = ["--checkpoint", str(SHIPPED), "--method", "alti", SENTENCE]
    (line,) = printed(capsys, attribute_cmd.main, argv)
    command = json.loads(line)
    e = studio.attribute(m, t, "alti")
    assert same_json(e.to_json(), command)
    z = np.asarray(studio.attribution_figure(e).data[0].z, dtype=float)  # (T, S + T)
    want = np.asarray(command["contributions"], dtype=float)
    S, T = len(command["source"]), len(command["output"])
    assert z.shape == want.shape == (T, S + T)
    later = np.isnan(z)
    assert later[:, S:].sum() == T * (T - 1) // 2 and not later[:, :S].any()
    assert np.allclose(z[~later], want[~later], atol=1e-6)
    bars = studio.source_share_figure(e).data[0]
    assert np.allclose(np.asarray(bars.y, dtype=float), command["source_share"], atol=1e-6)


def test_a_contrast_is_the_command_s(shipped, capsys):
    m, t = shipped
    foil = "je suis à la gare ."
    argv = ["--checkpoint", str(SHIPPED), "--method", "grad-input", "--contrast", foil, SENTENCE]
    (line,) = printed(capsys, attribute_cmd.main, argv)
    command = json.loads(line)
    e = studio.attribute(m, t, "grad-input", contrast=foil)
    assert same_json(e.to_json(), command)


def test_patching_and_its_figures_are_the_command_s(shipped, capsys):
    m, _ = shipped
    argv = ["--checkpoint", str(SHIPPED), "--clean", CLEAN, "--corrupt", CORRUPT]
    *rows, summary = [json.loads(x) for x in printed(capsys, patch_cmd.main, argv)]
    p = studio.patch(m, CLEAN, CORRUPT)
    assert json.loads(json.dumps(p.rows)) == rows and json.loads(json.dumps(p.summary())) == summary
    heads, stream = studio.patching_figures(p)
    about = "the clean run into the corrupted run"
    assert heads.to_dict() == patch_figures.heads_figure(rows, about).to_dict()
    want = patch_figures.stream_figure(rows, summary["clean"], summary["prefix"], about)
    assert stream.to_dict() == want.to_dict()
    noised = studio.patching_figures(studio.patch(m, CLEAN, CORRUPT, direction="noise"))[0]
    assert "the corrupted run into the clean run" in json.dumps(noised.to_dict()["layout"])


def test_attribution_patching_is_the_command_s(shipped, capsys):
    m, _ = shipped
    argv = ["--checkpoint", str(SHIPPED), "--clean", CLEAN, "--corrupt", CORRUPT]
    argv += ["--method", "attribution"]
    *rows, summary = [json.loads(x) for x in printed(capsys, patch_cmd.main, argv)]
    done = studio.attribution_patching(m, CLEAN, CORRUPT)
    assert json.loads(json.dumps(done.patching.rows)) == rows
    assert json.loads(json.dumps(done.summary())) == summary
    heads, stream = studio.estimate_figures(done)
    about = "the clean run into the corrupted run: attribution patching's estimate"  # the page's
    guessed = [{**r, "effect": r["estimate"]} for r in rows]
    assert heads.to_dict() == patch_figures.heads_figure(guessed, about).to_dict()
    want = patch_figures.stream_figure(guessed, summary["clean"], summary["prefix"], about)
    assert stream.to_dict() == want.to_dict()


def test_path_patching_is_the_command_s(shipped, capsys):
    m, _ = shipped
    argv = ["--checkpoint", str(SHIPPED), "--clean", CLEAN, "--corrupt", CORRUPT]
    for extra, frozen in (([], False), (["--freeze-mlps"], True)):
        lines = printed(capsys, patch_cmd.main, [*argv, "--receivers", "cross:1.0", *extra])
        *rows, summary = [json.loads(x) for x in lines]
        done = studio.path_patch(m, CLEAN, CORRUPT, "cross:1.0", freeze_mlps=frozen)
        assert json.loads(json.dumps(done.patching.rows)) == rows
        assert json.loads(json.dumps(done.summary())) == summary
        assert summary["freeze_mlps"] is frozen
    mlps = "MLPs frozen too"
    about = f"the clean run into the corrupted run, each head through cross:1.0 only ({mlps})"
    want = patch_figures.heads_figure(rows, about).to_dict()
    assert studio.path_patching_figure(done).to_dict() == want
    with pytest.raises(TranslationError, match="no head cross:9.0"):
        studio.path_patch(m, CLEAN, CORRUPT, "cross:9.0")


def test_direct_logit_attribution_is_the_command_s(shipped, capsys):
    from core import logit_attribution as dla_cmd
    from core.figures.logit_attribution import logit_attribution_figure

    m, t = shipped
    argv = ["--checkpoint", str(SHIPPED), "--source", SENTENCE, "--step", "1"]
    lines = [json.loads(x) for x in printed(capsys, dla_cmd.main, argv)]
    a = studio.logit_attribution(m, t, step=1)
    assert json.loads(json.dumps(a.lines())) == lines
    assert abs(a.total - a.logit) < 1e-4  # the terms sum to the model's own logit
    figure = studio.logit_attribution_figure(a).to_dict()
    assert figure == logit_attribution_figure(a).to_dict()
    wrong = studio.logit_attribution(m, t, 1, answer="suis", wrong="es")
    argv += ["--answer", "suis", "--wrong", "es", "--per-layer"]
    lines = [json.loads(x) for x in printed(capsys, dla_cmd.main, argv)]
    assert json.loads(json.dumps(wrong.lines("per_layer"))) == lines


def test_maps_figures_draw_the_recorded_pass(shipped):
    """The head map and the grid draw the translation's maps, which are the recorded pass's
    weights and the hook sites' patterns (one pass, three ways in)."""
    m, t = shipped
    r, cache = studio.record(m, t), studio.cache(m, t)
    assert set(cache) <= set(m.hook_points()) and len(cache) >= 40  # what the pass reached
    maps = studio.maps(t)
    for kind in ("encoder", "decoder_self", "cross"):
        for layer, at in enumerate(r.attention[kind]):
            assert np.allclose(maps.weights(kind)[layer], at.weights[0].numpy(), atol=1e-5)
    site = cache["decoder.1.cross.pattern"][0]  # (H, T, S)
    assert torch.allclose(site, r.attention["cross"][1].weights[0], atol=1e-6)
    z = np.asarray(studio.head_figure(t, "cross", 1, 2).data[0].z, dtype=float)
    assert np.allclose(z, site[2].numpy(), atol=1e-6)
    grid = studio.grid_figure(t, "cross").to_dict()
    assert grid == attention_figures.grid_view_figure(maps, "cross").to_dict()
    assert len(studio.grid_figure(t, "encoder", layers=[1]).data) >= maps.heads
    view = select_view(studio.maps(t, words=True), "cross", 0, "mean")
    assert np.allclose(
        studio.head_figure(t, "cross", 0, "mean", words=True).data[0].z, view.weights
    )


@pytest.fixture(scope="module")
def other_models(tmp_path_factory) -> dict[str, str]:
    """Tiny random Hugging Face folders: an encoder-decoder, a decoder-only, a masked model."""
    from tests.hf_tiny import save_tiny
    from tests.lm_tiny import save_tiny_encoder, save_tiny_lm

    root = tmp_path_factory.mktemp("notebook_models")
    folders = {
        "marian": save_tiny(root / "marian"),
        "llama": save_tiny_lm(root / "llama", "llama"),
        "bert": save_tiny_encoder(root / "bert", "bert"),
    }
    return {name: str(folder) for name, folder in folders.items()}


@pytest.mark.parametrize("name", ["marian", "llama"])
def test_any_translator_opens_and_draws(other_models, name):
    """A Hugging Face folder goes through the same functions: every kind's maps, the cache of
    its hook sites, an attribution and its figures."""
    m = studio.open_model(other_models[name])
    t = studio.translate(m, "the boy is tall .", max_len=8)
    for kind in ("encoder", "decoder_self", "cross"):
        assert studio.grid_figure(t, kind).data and studio.head_figure(t, kind).data
    cache = studio.cache(m, t)
    assert "decoder.0.out" in cache and set(cache) <= set(m.hook_points())
    e = studio.attribute(m, t, "alti")
    assert np.allclose(e.contributions.sum(1), 1, atol=1e-4)
    assert studio.attribution_figure(e).data and studio.source_share_figure(e).data


@pytest.mark.parametrize(
    "name, sentence, title",
    [
        ("marian", "the boy is tall .", "Raw cross-attention"),
        ("llama", "the boy is tall .", "Raw attention"),
        ("bert", "the boy is [MASK] .", "Raw attention"),
    ],
)
def test_the_figures_name_the_attention_the_model_has(other_models, name, sentence, title):
    """A one-stack model's attention method reads its one attention, and its figures say so
    as the page does (``methods.method_name``), in words or in pieces."""
    m = studio.open_model(other_models[name])
    e = studio.attribute(m, studio.translate(m, sentence, max_len=8), "attention")
    for words in (False, True):
        assert studio.attribution_figure(e, words).layout.title.text.startswith(title)
        share = studio.source_share_figure(e, words).layout.title.text
        assert share.endswith(f"({title})"), share


def test_an_occlusion_contrast_draws_under_its_name(other_models):
    """Occlusion explains a contrast only; its figure once raised KeyError looking it up among
    the plain methods' names."""
    m = studio.open_model(other_models["marian"])
    t = studio.translate(m, "the boy is tall .", max_len=8)
    foil = " ".join(["suis" if w != "suis" else "je" for w in t.words])  # differs everywhere
    e = studio.attribute(m, t, "occlusion", contrast=foil)
    assert studio.attribution_figure(e).layout.title.text.startswith("Occlusion")


def test_what_a_model_cannot_do_is_refused_in_one_line(other_models):
    """A masked language model has no translation to patch: the command's refusal
    (``supports``), not a traceback from deep inside; its filled words are attributed (issue 65
    P6) as the command attributes them."""
    m = studio.open_model(other_models["bert"])
    t = studio.translate(m, "the boy is [MASK] .")
    explained = studio.attribute(m, t, "alti").to_json()
    argv = ["--checkpoint", str(other_models["bert"]), "--method", "alti", "the boy is [MASK] ."]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert attribute_cmd.main(argv) == 0
    printed = json.loads(out.getvalue())
    assert np.allclose(printed["contributions"], explained["contributions"], atol=2e-6)
    with pytest.raises(TranslationError, match="masked language model"):
        studio.patch(m, "the boy is tall .", "the girl is tall .")
    for patched in (studio.attribution_patching, studio.path_patch):
        with pytest.raises(TranslationError, match="masked language model"):
            patched(m, "the boy is tall .", "the girl is tall .")


def test_the_notebook_page_names_every_function():
    page = (ROOT / "docs" / "notebook.md").read_text(encoding="utf-8")
    functions = [
        name
        for name, f in inspect.getmembers(studio, inspect.isfunction)
        if f.__module__ == studio.__name__ and not name.startswith("_")  # its public ones
    ]
    assert len(functions) >= 10
    missing = [name for name in functions if f"`{name}(" not in page]
    assert not missing, missing


def test_the_notebook_ships_without_outputs():
    """Stored as source: no outputs (nothing of a machine's paths or of a run), no counts."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) >= 8
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert "/work/" not in NOTEBOOK.read_text() and "/home/" not in NOTEBOOK.read_text()


@pytest.mark.slow
def test_the_notebook_runs_and_draws_its_figures():
    """docs/notebook.ipynb executed in a Jupyter kernel opened in docs/, as a reader opens it:
    no cell fails, and every figure cell shows a Plotly figure."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # CellExecutionError names the cell that failed
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    drawn = [c for c in code if any(PLOTLY in o.get("data", {}) for o in c.outputs)]
    assert len(drawn) == 9, [c.source for c in code]
    text = "".join(o.get("data", {}).get("text/plain", "") for c in code for o in c.outputs)
    assert "je suis à la maison ." in text


def test_circuits_gives_the_command_lines_and_the_pages_charts():
    """``notebook.circuits`` of the shipped induction model's history: what ``python -m
    core.circuits`` prints, and the Train page's four charts, the phase change shaded."""
    from core.circuits import main as circuits_main
    from tests.helpers import ROOT

    history = ROOT / "checkpoints" / "induction-2l.history"
    lines, figures = studio.circuits(str(history))
    assert lines[-1]["summary"] and lines[-1]["phase_change"]["formed"] == 575
    assert len(figures) == 4 and all(f.layout.shapes for f in figures)  # the band on each
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert circuits_main(["--run", str(history)]) == 0
    assert [json.loads(line) for line in out.getvalue().splitlines()] == lines


def test_a_students_mistakes_are_refused_as_the_commands_refuse_them(shipped, tmp_path):
    """Audit: the notebook ran what the commands refuse (beam 0, max_len 0, a target language
    a model of one language has not, a circuits path holding no run) or failed deep in numpy
    or torch (the induction model's empty cross-attention, a layer it lacks, device "gpu")."""
    m, t = shipped
    for asked, words in (
        ({"beam": 0}, "beam must be a whole number from 1 to 16 (got 0)"),
        ({"beam": 100}, "from 1 to 16"),
        ({"max_len": 0}, "max_len must be a whole number from 1 to 200"),
        ({"alpha": -1.0}, "alpha must be a number from 0.0 to 2.0"),
        ({"target_lang": "__de__"}, "target_lang __de__: this model writes one language"),
    ):
        with pytest.raises(TranslationError, match=re.escape(words)):
            studio.translate(m, "I'm home.", **asked)
    for run in (tmp_path / "nope.history", SHIPPED, SHIPPED.with_suffix(".history")):
        with pytest.raises(ValueError, match="nor a .history file|has no circuit scores"):
            studio.circuits(str(run))
    with pytest.raises(ValueError, match=re.escape("layers must be among 0..1 (got [5])")):
        studio.grid_figure(t, "cross", layers=[5])
    for layer, head in ((9, 0), (0, 99)):  # an IndexError before, which the docs' except missed
        with pytest.raises(ValueError, match="does not exist"):
            studio.head_figure(t, "cross", layer=layer, head=head)
    with pytest.raises(ValueError, match="Unknown attention kind 'sequence'"):
        studio.grid_figure(t, "sequence")
    with pytest.raises(ValueError, match="give 'auto', 'cpu', 'cuda'"):
        studio.open_model(str(SHIPPED), device="gpu")
    with pytest.raises(TranslationError, match="answers is a pair of words"):
        studio.patch(m, CLEAN, CORRUPT, answers="le")
    with pytest.raises(AttributionError, match="lacks: xyzzyq, blorf"):
        studio.attribute(m, t, "grad-input", contrast="xyzzyq blorf")
    assert set(studio.cache(m, t, "decoder.1.cross.z")) == {"decoder.1.cross.z"}  # one site
    induction = studio.open_model(str(SHIPPED.parent / "induction-2l.hf"))
    with pytest.raises(TranslationError, match="reads a token sequence, no sentence"):
        studio.translate(induction, "a b c d a b c", max_len=8)  # was fifty t45, decoded
    read = studio.translate(induction, "", target="t3 t7 t9 t3 t7 t9")
    for kind in ("cross", "encoder"):
        with pytest.raises(ValueError, match=f"reads no source: it has no {kind} weights"):
            studio.grid_figure(read, kind)
