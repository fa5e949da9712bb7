"""Tests for core.explore: model listing, checks, views, playback and training snapshots."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

from core import attention_view as av
from core import explore as ex
from core import jobs
from core.checkpoint import load_checkpoint
from core.data import tokenize
from core.decode import TranslationError, prepare_source, teacher_forced
from core.runs import RunDir
from core.trainer import D2L_PROBES


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    """The tiny model, loaded once."""
    return load_checkpoint(tiny_checkpoint)


@pytest.fixture(scope="module")
def home(tiny):
    """The tiny model's translation of "i'm home ." and its maps."""
    t = ex.translate_sentence(tiny, "i'm home .")
    return t, ex.SentenceMaps.from_translation(t)


def _maps(cross: np.ndarray, src: list[str], out: list[str]) -> ex.SentenceMaps:
    """SentenceMaps around a hand-made cross map (1, 1, T, S); the other kinds are uniform."""
    s, t = len(src), len(out)
    enc = np.full((1, 1, s, s), 1 / s, dtype=np.float32)
    dec = np.tril(np.ones((t, t), dtype=np.float32))
    dec = (dec / dec.sum(-1, keepdims=True))[None, None]
    return ex.SentenceMaps(
        enc, dec, np.asarray(cross, dtype=np.float32), src, out, ["<bos>"] + out[:-1]
    )


# ----------------------------------------------------------------------------- models


def _touch(path, t: float) -> None:
    os.utime(path, (t, t))


def test_list_models_newest_first_with_details_and_broken_files(
    tmp_path, tiny_checkpoint, tiny_run
):
    ckpts, runs = tmp_path / "ckpts", tmp_path / "runs"
    ckpts.mkdir()
    shutil.copy(tiny_checkpoint, ckpts / "fra-eng-small.pt")
    (ckpts / "broken.pt").write_bytes(b"not a checkpoint")
    shutil.copytree(tiny_run, runs / "tiny")
    (runs / "starting").mkdir()
    (runs / "starting" / "config.json").write_text("{}")
    for i, path in enumerate(
        [
            ckpts / "broken.pt",
            runs / "tiny" / "best.pt",
            runs / "tiny" / "last.pt",
            ckpts / "fra-eng-small.pt",
            runs / "starting",
        ]
    ):
        _touch(path, 1_000_000 + i)
    entries = ex.list_models(ckpts, runs)
    assert [e.key for e in entries] == [
        "runs/starting/",
        "checkpoints/fra-eng-small.pt",
        "runs/tiny/last.pt",
        "runs/tiny/best.pt",
        "checkpoints/broken.pt",
    ]
    kinds = {e.key: e.kind for e in entries}
    assert kinds["runs/tiny/best.pt"] == "run best" and kinds["runs/tiny/last.pt"] == "run last"
    shipped = entries[1]
    assert shipped.usable and shipped.kind == "shipped checkpoint"
    assert (shipped.d_model, shipped.layers, shipped.heads, shipped.step) == (64, (2, 2), 4, 150)
    assert shipped.params == sum(
        p.numel() for p in load_checkpoint(tiny_checkpoint).model.parameters()
    )
    assert shipped.data.startswith("tiny.tsv")
    assert shipped.run_dir == str(runs / "tiny")  # found through the checkpoint's run name
    broken = entries[-1]
    assert not broken.usable and "not a readable" in broken.reason
    assert not entries[0].usable and "no checkpoint" in entries[0].reason
    assert ex.default_entry(entries) is shipped
    assert ex.find_entry(entries, "checkpoints/broken.pt") is None


def test_list_models_reads_val_bleu_of_last_from_metrics(tmp_path, tiny_run):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "tiny")
    RunDir(runs / "tiny").append_metrics({"kind": "eval", "step": 150, "val_bleu": 42.5})
    entries = {e.key: e for e in ex.list_models(tmp_path / "none", runs)}
    assert entries["runs/tiny/last.pt"].val_bleu == 42.5
    assert entries["runs/tiny/best.pt"].val_bleu is None  # best_bleu is -1: never measured
    assert "val BLEU 42.5" in entries["runs/tiny/last.pt"].label


def test_list_models_of_missing_directories_is_empty(tmp_path):
    assert ex.list_models(tmp_path / "a", tmp_path / "b") == []
    assert ex.default_entry([]) is None


def test_default_entry_without_shipped_model_is_newest_usable():
    old = ex.ModelEntry("runs/a/last.pt", "a", "run last", 1.0)
    new = ex.ModelEntry("runs/b/last.pt", "b", "run last", 2.0)
    broken = ex.ModelEntry("runs/c/last.pt", "c", "run last", 3.0, usable=False, reason="x")
    assert ex.default_entry([broken, new, old]) is new


def test_dirs_follow_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(jobs.CHECKPOINTS_ENV, str(tmp_path / "c"))
    monkeypatch.setenv(jobs.RUNS_ENV, str(tmp_path / "r"))
    assert ex.checkpoints_dir() == tmp_path / "c" and ex.runs_dir() == tmp_path / "r"
    monkeypatch.delenv(jobs.CHECKPOINTS_ENV)
    assert ex.checkpoints_dir() == jobs.REPO_ROOT / "checkpoints"


# ----------------------------------------------------------------------------- translating


def test_translate_sentence_and_topk_frame(home):
    t, _ = home
    assert t.text == "je suis chez moi ."
    frame = ex.topk_frame(t)
    assert list(frame["output token"]) == t.output_tokens
    assert list(frame.columns[2:]) == [f"#{i}" for i in range(1, 6)]
    assert frame["#1"].str.startswith("je ").iloc[0]


@pytest.mark.parametrize(
    ("sentence", "match"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("qwerty zxcv", "vocabulary"),
        ("go . " * 31, "at most 60"),
    ],
)
def test_translate_sentence_refuses_bad_input(tiny, sentence, match):
    with pytest.raises(TranslationError, match=match):
        ex.translate_sentence(tiny, sentence)


def test_translate_sentence_warns_about_unknown_and_long_input(tiny):
    t = ex.translate_sentence(tiny, "i'm home zorglub .")
    assert any("zorglub" in w for w in t.warnings)
    short = type(tiny)(
        tiny.model, tiny.src_vocab, tiny.tgt_vocab, {**tiny.meta, "data_config": {"max_len": 2}}
    )
    assert any(
        "at most 2 tokens" in w for w in ex.translate_sentence(short, "i am cold .").warnings
    )


def test_beam_search_settings_reach_the_decoder(tiny):
    t = ex.translate_sentence(tiny, "he's calm .", ex.DecodeSettings(beam_size=3, topk=2))
    assert t.text == "il est calme ."
    assert all(len(step) == 2 for step in t.topk)


@pytest.mark.parametrize(
    ("pred", "label", "expected"),
    [
        ("a b c", "a b c", 1.0),
        ("a b c", "a b", math.sqrt(2 / 3) * (1 / 2) ** 0.25),  # no brevity penalty
        ("a", "a b", math.exp(-1.0)),  # brevity penalty exp(1 - 2/1), p1 = 1
        ("x y", "a b", 0.0),
        ("", "a b", 0.0),
    ],
)
def test_d2l_bleu_known_values(pred, label, expected):
    assert ex.d2l_bleu(pred.split(), label.split()) == pytest.approx(expected)


def test_d2l_check_reproduces_the_book(tiny):
    check = ex.d2l_check(tiny)
    assert [r["source"] for r in check.rows] == [s for s, _ in ex.D2L_CHECK]
    assert [r["translation"] for r in check.rows] == [r for _, r in ex.D2L_CHECK]
    assert all(r["bleu"] == pytest.approx(1.0) for r in check.rows)
    assert check.bleu == pytest.approx(100.0)


def test_d2l_check_scores_untranslatable_rows_zero(tiny):
    empty = type(tiny)(
        tiny.model, tiny.src_vocab.__class__(tiny.src_vocab.itos[:4]), tiny.tgt_vocab, tiny.meta
    )  # knows no words at all
    check = ex.d2l_check(empty)
    assert all(r["translation"] == "" and r["bleu"] == 0 and r["note"] for r in check.rows)
    assert check.bleu == 0.0


# ----------------------------------------------------------------------------- validation


def test_validation_examples_group_references(tmp_path):
    corpus = tmp_path / "pairs.tsv"
    lines = [f"I see {i}.\tJe vois {i}." for i in range(40)] + ["Go.\tVa !", "Go.\tMarche."]
    corpus.write_text("\n".join(lines) + "\n")
    meta = {
        "data_config": {
            "source": str(corpus),
            "split": "head",
            "num_train": 30,
            "num_val": 12,
            "min_freq": 1,
        }
    }
    examples, reason = ex.validation_examples(meta, n=100)
    assert reason == ""
    assert [e.source for e in examples] == [f"i see {i} ." for i in range(30, 40)] + ["go ."]
    assert examples[-1].references == ["va !", "marche ."]
    few, _ = ex.validation_examples(meta, n=3)
    assert [e.source for e in few] == ["i see 30 .", "i see 35 .", "go ."]  # spread out


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({}, "does not record"),
        ({"data_config": {"source": "/no/such/file.tsv"}}, "missing"),
        (
            {"data_config": {"source": "PLACEHOLDER", "split": "head", "num_val": 0}},
            "without a validation split",
        ),
        ({"data_config": {"source": "PLACEHOLDER", "max_len": 0}}, "could not be rebuilt"),
    ],
)
def test_validation_examples_explain_why_there_are_none(meta, match, tiny_corpus):
    if meta.get("data_config", {}).get("source") == "PLACEHOLDER":
        meta = {"data_config": {**meta["data_config"], "source": str(tiny_corpus)}}
    examples, reason = ex.validation_examples(meta)
    assert examples == [] and match in reason


def test_validation_examples_never_download(monkeypatch, tmp_path):
    monkeypatch.setenv("FRA_ENG_ZIP", str(tmp_path / "absent.zip"))
    monkeypatch.setenv("ATTENTION_STUDIO_CACHE", str(tmp_path / "cache"))
    examples, reason = ex.validation_examples({"data_config": {"source": "fra-eng"}})
    assert examples == [] and "FRA_ENG_ZIP" in reason


# ----------------------------------------------------------------------------- maps and views


def test_sentence_maps_shapes_and_axes(home):
    t, maps = home
    s, n = len(t.src_tokens), len(t.output_tokens)
    assert maps.encoder.shape == (2, 4, s, s) and maps.encoder.dtype == np.float32
    assert maps.decoder_self.shape == (2, 4, n, n)
    assert maps.cross.shape == (2, 4, n, s)
    assert maps.tokens("encoder") == (t.src_tokens, t.src_tokens)
    assert maps.tokens("decoder_self") == (t.output_tokens, ["<bos>"] + t.tokens)
    assert maps.tokens("cross") == (t.output_tokens, t.src_tokens)
    for kind in ex.KINDS:
        q, k = maps.tokens(kind)
        assert maps.weights(kind).shape[-2:] == (len(q), len(k))
        np.testing.assert_allclose(maps.weights(kind).sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(maps.decoder_self, k=1) == 0)  # causal: masked cells are exactly 0
    with pytest.raises(ValueError, match="kind"):
        maps.weights("sideways")


def test_select_view_head_mean_max_and_rollout(home):
    _, maps = home
    np.testing.assert_array_equal(ex.select_view(maps, "cross", 1, 2).weights, maps.cross[1, 2])
    np.testing.assert_allclose(
        ex.select_view(maps, "cross", 0, "mean").weights, maps.cross[0].mean(0), rtol=1e-6
    )
    np.testing.assert_allclose(
        ex.select_view(maps, "decoder_self", 1, "max").weights, maps.decoder_self[1].max(0)
    )
    roll = ex.select_view(maps, "encoder", 1, "rollout")
    np.testing.assert_allclose(roll.weights, av.rollout(maps.encoder)[1], rtol=1e-5)
    assert "rollout through layers 0–1" in roll.title and roll.note == ""


@pytest.mark.parametrize(
    ("kind", "layer", "head", "error"),
    [
        ("cross", 0, "rollout", ValueError),
        ("cross", 5, "0", IndexError),
        ("cross", 0, "4", IndexError),
        ("cross", 0, "median", IndexError),
    ],
)
def test_select_view_rejects_impossible_views(home, kind, layer, head, error):
    with pytest.raises(error):
        ex.select_view(home[1], kind, layer, head)


def test_hiding_specials_drops_columns_and_renormalises_rows():
    cross = np.array(
        [
            [
                [
                    [0.5, 0.25, 0.25],  # "a b <eos>"
                    [0.0, 0.0, 1.0],
                ]
            ]
        ]
    )  # all on <eos>: stays a zero row, no NaN
    maps = _maps(cross, ["a", "b", "<eos>"], ["x", "<eos>"])
    view = ex.select_view(maps, "cross", 0, 0, hide=True)
    assert view.key_tokens == ["a", "b"] and view.note == ex.HIDDEN_NOTE
    np.testing.assert_allclose(view.weights, [[2 / 3, 1 / 3], [0.0, 0.0]], rtol=1e-6)
    self_view = ex.select_view(maps, "decoder_self", 0, 0, hide=True)
    assert self_view.key_tokens == ["x"]  # <bos> hidden from the decoder's keys
    np.testing.assert_allclose(self_view.weights, [[0.0], [1.0]])


def test_view_figure_labels_axes_and_says_when_hidden(home):
    _, maps = home
    view = ex.select_view(maps, "cross", 0, 1, hide=True)
    fig = ex.view_figure(view)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), view.weights)
    layout = fig.layout.to_plotly_json()
    assert layout["xaxis"]["title"]["text"] == "source token (key)"
    assert layout["yaxis"]["title"]["text"] == "output token (query)"
    assert ex.HIDDEN_NOTE in layout["title"]["subtitle"]["text"]
    assert "<eos>" not in layout["xaxis"]["ticktext"]
    stretched = ex.view_figure(ex.select_view(maps, "cross", 0, 1), stretch=True)
    assert stretched.data[0].zmax == pytest.approx(av.percentile_cap(maps.cross[0, 1]))


@pytest.mark.parametrize(("layers", "traces"), [(None, 8), ([1], 4)])
def test_grid_view_figure_shapes_and_masked_cells(home, layers, traces):
    _, maps = home
    fig = ex.grid_view_figure(maps, "decoder_self", layers=layers)
    assert len(fig.data) == traces
    n = len(maps.output_tokens)
    first = layers[0] if layers else 0
    for i, trace in enumerate(fig.data):
        z = np.asarray(trace.z)
        assert z.shape == (n, n)
        np.testing.assert_array_equal(z, maps.decoder_self[first + i // 4, i % 4])
        assert np.all(np.triu(z, k=1) == 0)
    assert fig.layout.coloraxis.cmax == 1.0


def test_grid_view_figure_hidden_specials_and_note(home):
    _, maps = home
    fig = ex.grid_view_figure(maps, "cross", hide=True, stretch=True)
    assert all(np.asarray(t.z).shape == (len(maps.output_tokens), 3) for t in fig.data)
    rows = np.asarray(fig.data[0].z).sum(-1)
    np.testing.assert_allclose(rows[rows > 0], 1.0, rtol=1e-5)
    subtitle = fig.layout.title.subtitle.text
    assert ex.HIDDEN_NOTE in subtitle and "stretched" in subtitle
    assert fig.layout.coloraxis.cmax < 1.0


def test_view_csv_has_one_row_per_cell(home):
    view = ex.select_view(home[1], "cross", 0, 0)
    lines = ex.view_csv(view).decode().splitlines()
    assert lines[0] == "query_index,query_token,key_index,key_token,weight"
    assert len(lines) == 1 + view.weights.size


def test_head_table_columns_per_kind_and_labels():
    n = 5
    prev = np.zeros((n, n))
    prev[0, 0] = 1.0
    prev[np.arange(1, n), np.arange(n - 1)] = 1.0
    diag = np.eye(n)
    tokens = ["a", "b", "c", "d", "<eos>"]
    enc = np.stack([prev, diag])[None].astype(np.float32)  # (1, 2, 5, 5)
    maps = ex.SentenceMaps(enc, enc, enc, tokens, tokens, ["<bos>"] + tokens[:-1])
    table = ex.head_table(maps, "encoder")
    assert list(table["label"]) == ["previous-token head", "diagonal head"]
    assert "monotonicity" not in table and "bos" not in table
    flipped = np.stack([diag[::-1], diag])[None].astype(np.float32)  # reversed, in order
    maps = ex.SentenceMaps(enc, enc, flipped, tokens, tokens, ["<bos>"] + tokens[:-1])
    assert ex.head_table(maps, "cross")["monotonicity"].tolist() == pytest.approx([-1.0, 1.0])
    assert "bos" in ex.head_table(maps, "decoder_self")


def test_head_options_offer_rollout_only_for_the_encoder():
    assert ex.head_options("encoder", 2) == ["0", "1", "mean", "max", "rollout"]
    assert ex.head_options("cross", 2) == ["0", "1", "mean", "max"]


# ----------------------------------------------------------------------------- playback


def test_playback_rows_match_the_full_maps(home):
    t, maps = home
    for step in range(len(t.output_tokens)):
        p = ex.playback_step(maps, t.topk, step, 1)
        np.testing.assert_array_equal(p.cross, maps.cross[1, :, step])
        np.testing.assert_array_equal(p.self_row, maps.decoder_self[1, :, step, : step + 1])
        assert p.self_keys == t.decoder_inputs[: step + 1]
        assert p.prefix == t.output_tokens[: step + 1] and p.produced == t.output_tokens[step]
        assert p.topk[0][0] == p.produced  # greedy: the most likely candidate was chosen
    with pytest.raises(IndexError):
        ex.playback_step(maps, t.topk, len(t.output_tokens), 0)
    with pytest.raises(IndexError):
        ex.playback_step(maps, t.topk, 0, 2)


def test_free_running_maps_equal_one_pass_over_the_models_own_output(tiny, home):
    t, maps = home
    ids, _, _, _ = prepare_source("i'm home .", tiny.src_vocab, 512)
    out_ids = tiny.tgt_vocab.encode(t.output_tokens)
    _, forced = teacher_forced(tiny.model, torch.tensor([ids]), out_ids)
    np.testing.assert_allclose(maps.cross, forced.cross[:, 0].numpy(), atol=1e-5)
    np.testing.assert_allclose(maps.decoder_self, forced.decoder_self[:, 0].numpy(), atol=1e-5)


def test_teacher_forced_maps_follow_the_reference(tiny, home):
    forced = ex.teacher_forced_maps(tiny, "i'm home .", "je suis à la maison .")
    assert forced.output_tokens == ["je", "suis", "à", "la", "maison", ".", "<eos>"]
    assert forced.decoder_inputs == ["<bos>", "je", "suis", "à", "la", "maison", "."]
    assert forced.cross.shape == (2, 4, 7, 4) and forced.decoder_self.shape == (2, 4, 7, 7)
    same = ex.teacher_forced_maps(tiny, "i'm home .", "je suis chez moi .")
    np.testing.assert_allclose(same.cross, home[1].cross, atol=1e-5)
    with pytest.raises(TranslationError, match="reference is empty"):
        ex.teacher_forced_maps(tiny, "i'm home .", "  ")


def test_head_rows_figure(home):
    t, maps = home
    p = ex.playback_step(maps, t.topk, 2, 0)
    fig = ex.head_rows_figure(p.cross, p.src_tokens, "x", "source token (key)")
    assert np.asarray(fig.data[0].z).shape == (4, len(t.src_tokens))
    assert list(fig.data[0].y) == [f"head {h}" for h in range(4)]


# ----------------------------------------------------------------------------- training


def test_snapshot_series_with_metrics(tiny_run):
    assert ex.probe_sentences(tiny_run) == D2L_PROBES
    series = ex.snapshot_series(tiny_run, "i'm home .")
    assert series.steps == RunDir(tiny_run).snapshot_steps() == [50, 100, 150]
    records = RunDir(tiny_run).read_metrics()
    for frame in series.frames:
        losses = [r["loss"] for r in records if r["kind"] == "train" and r["step"] <= frame.step]
        assert frame.loss == pytest.approx(losses[-1])
        assert frame.val_bleu is None  # the tiny run has no validation split
        assert frame.maps.encoder.shape == (2, 4, 4, 4)
        assert frame.maps.src_tokens == ["i'm", "home", ".", "<eos>"]
    assert series.frames[-1].maps.output_tokens == tokenize("je suis chez moi .") + ["<eos>"]
    assert ex.snapshot_series(tiny_run, "never probed .").frames == []


def test_snapshot_series_skips_damaged_files(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "snapshots" / "step_00000200.pt").write_bytes(b"garbage")
    RunDir(run).append_metrics({"kind": "eval", "step": 100, "val_bleu": 12.0, "val_loss": 1.5})
    series = ex.snapshot_series(run, "go .")
    assert series.steps == [50, 100, 150] and series.skipped == ["step 200: UnpicklingError"]
    assert (series.frames[1].val_bleu, series.frames[1].val_loss) == (12.0, 1.5)
    assert ex.probe_sentences(run) == D2L_PROBES  # falls back to an older snapshot
    assert ex.probe_sentences(tmp_path / "nothing") == []


def test_training_curve_figure(tiny_run):
    fig = ex.training_curve_figure(tiny_run, 100)
    assert fig.data[0].name == "training loss" and len(fig.data[0].x) == 15
    assert fig.layout.shapes[0].x0 == 100


# ----------------------------------------------------------------------------- URL state


def test_view_state_round_trips_through_the_url():
    state = ex.ViewState(
        model="runs/a/best.pt",
        sentence="go .",
        beam=4,
        alpha=0.8,
        max_len=30,
        kind="encoder",
        layer=1,
        head="rollout",
        hide=True,
    )
    query = state.to_query()
    assert all(isinstance(v, str) for v in query.values())
    assert ex.ViewState.from_query(query) == state
    assert set(ex.ViewState().to_query()) == {"model", "sentence", "kind", "layer", "head"}
    assert ex.ViewState().to_query(("sentence", "beam")) == {"sentence": ex.DEFAULT_SENTENCE}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"layer": "x"}, {"layer": 0}),
        ({"layer": "-3"}, {"layer": 0}),
        ({"kind": "sideways"}, {"kind": "cross"}),
        ({"head": "7x"}, {"head": "0"}),
        ({"beam": "-2", "max_len": "100000"}, {"beam": 1, "max_len": 500}),
        ({"alpha": "nan"}, {"alpha": 0.6}),
        ({"hide": "true"}, {"hide": True}),
    ],
)
def test_view_state_ignores_malformed_values(query, expected):
    state = ex.ViewState.from_query(query)
    assert {k: getattr(state, k) for k in expected} == expected


def test_clamp_view_keeps_layer_and_head_inside_the_model(home):
    state = ex.clamp_view(ex.ViewState(kind="cross", layer=9, head="7"), home[1])
    assert (state.layer, state.head) == (1, "3")
    state = ex.clamp_view(ex.ViewState(kind="cross", head="rollout"), home[1])
    assert state.head == "0"


def test_list_models_survives_a_damaged_metrics_file(tmp_path, tiny_run):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "tiny")
    (runs / "tiny" / "metrics.jsonl").write_text("{half a record\n" + json.dumps({"x": 1}))
    assert {e.key for e in ex.list_models(tmp_path / "none", runs)} == {
        "runs/tiny/best.pt",
        "runs/tiny/last.pt",
    }
