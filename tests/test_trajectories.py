"""Tests for per-head trajectories over training: the numbers on hand-made maps, the disk
cache, each head's largest change, the stages heuristic, B − A ordering and the command."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from core import trajectories as command
from core.alignment.head_aer import head_trajectories, probe_head_aer
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.attention.trajectories import history_of, snapshot_models, trajectories
from core.attention.trajectory_numbers import batch_metrics, probe_means
from core.attention.trajectory_reading import (
    STAGES,
    MapDifference,
    heads_like_the_maps,
    largest_change,
    map_difference,
    specialisation,
    stages,
    step_difference,
)
from core.places import trajectories_root
from core.runs.run_dir import RunDir


@pytest.fixture
def runs_env(tmp_path, monkeypatch):
    """The runs root (and so the trajectories cache) in a temporary directory."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def one(w, kind):
    """batch_metrics of one (Tq, Tk) map as one head of one layer: {metric: float}."""
    w = np.asarray(w, dtype=np.float64)[None, None, None]  # (1, 1, 1, Tq, Tk)
    out = batch_metrics(w, np.array([w.shape[-2]]), np.array([w.shape[-1]]), kind)
    return {k: float(v[0, 0, 0]) for k, v in out.items()}


# ----------------------------------------------------------------------------- the numbers


def test_identity_map_has_no_entropy_and_full_diagonal():
    m = one(np.eye(3), "encoder")
    assert m["entropy"] == pytest.approx(0.0)
    assert m["diagonal"] == pytest.approx(1.0)
    assert m["previous"] == pytest.approx(0.0)
    assert m["special"] == pytest.approx(1 / 3)  # only the last row sits on <eos>


def test_uniform_map_has_maximal_entropy():
    m = one(np.full((4, 4), 0.25), "encoder")
    assert m["entropy"] == pytest.approx(math.log(4))
    assert m["diagonal"] == pytest.approx(0.25)
    assert m["previous"] == pytest.approx(3 / 16)  # row 0 has no previous position
    assert m["special"] == pytest.approx(0.25)


def test_previous_token_head_of_the_decoder():
    w = np.zeros((4, 4))
    w[0, 0] = 1.0
    w[np.arange(1, 4), np.arange(0, 3)] = 1.0  # step i reads step i - 1
    m = one(w, "decoder_self")
    assert m["previous"] == pytest.approx(0.75)
    assert m["diagonal"] == pytest.approx(0.25)
    assert m["special"] == pytest.approx(0.5)  # rows 0 and 1 sit on <bos>, key 0


def test_cross_diagonal_is_rescaled_and_has_no_previous():
    w = np.zeros((3, 5))
    w[[0, 1, 2], [0, 2, 4]] = 1.0  # the proportional diagonal of 3 queries over 5 keys
    m = one(w, "cross")
    assert m["diagonal"] == pytest.approx(1.0)
    assert math.isnan(m["previous"])
    assert m["special"] == pytest.approx(1 / 3)  # the last row on <eos>
    w = np.zeros((3, 5))
    w[:, 4] = 1.0
    assert one(w, "cross")["diagonal"] == pytest.approx(1 / 3)  # only the last row is near


def test_padding_changes_nothing():
    a, b = np.eye(3), np.full((2, 2), 0.5)
    batch = np.zeros((1, 2, 1, 3, 3))
    batch[0, 0, 0], batch[0, 1, 0, :2, :2] = a, b
    out = batch_metrics(batch, np.array([3, 2]), np.array([3, 2]), "encoder")
    for name, alone in (("a", one(a, "encoder")), ("b", one(b, "encoder"))):
        i = 0 if name == "a" else 1
        for metric, value in alone.items():
            assert out[metric][0, i, 0] == pytest.approx(value), (name, metric)


def test_probe_means_average_the_probes(home_translation):
    _, maps = home_translation
    means = probe_means([maps, maps])
    assert set(means) == set(KINDS)
    for kind in KINDS:
        assert means[kind]["entropy"].shape == maps.weights(kind).shape[:2]
        assert np.all(means[kind]["entropy"] >= 0)


def test_validation_means_do_not_depend_on_how_the_pairs_are_batched(tiny_model, monkeypatch):
    """More pairs than one batch: the means over batches equal those of one batch (a loop
    variable once shadowed the model after the first batch)."""
    import core.attention.trajectory_numbers as numbers

    rows = [([4 + i, 5, tiny_model.eos_id], [6, 7 + i % 3]) for i in range(7)]
    whole = numbers.validation_means(tiny_model, rows)
    monkeypatch.setattr(numbers, "BATCH", 3)
    batched = numbers.validation_means(tiny_model, rows)
    assert set(batched) == set(KINDS)
    for kind, metrics in whole.items():
        for metric, value in metrics.items():
            np.testing.assert_allclose(batched[kind][metric], value, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- a run, cached


def test_every_head_at_every_snapshot_and_the_cache(runs_env, tiny_run, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(tiny_run, run)
    first = trajectories(run, validation="off")
    steps = RunDir(run).snapshot_steps()
    assert first.steps == steps and first.computed == len(steps)
    heads = sum(shape[0] * shape[1] for shape in _shapes(run, steps[-1]))
    assert len(first.records) == len(steps) * heads
    assert list(trajectories_root().glob("*.json"))
    again = trajectories(run, validation="off")
    assert again.computed == 0 and again.frame().equals(first.frame())
    snap = RunDir(run).load_snapshot(steps[0])  # a changed snapshot is measured again
    for probe in snap["probes"]:
        probe["cross"] = torch.flip(probe["cross"], dims=[-1])
    torch.save(snap, RunDir(run).snapshots / f"step_{steps[0]:08d}.pt")
    assert trajectories(run, validation="off").computed == 1


def _shapes(run, step):
    """The (L, H, ...) map arrays of each kind in one snapshot's first probe."""
    probe = RunDir(run).load_snapshot(step)["probes"][0]
    return [probe[k].shape for k in KINDS]


def test_validation_numbers_and_aer_where_a_checkpoint_was_saved(
    runs_env, tiny_run, val_checkpoint, tmp_path
):
    run = tmp_path / "run"  # the run without its snapshot models: only last.pt has a model
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("model_*.pt"))
    models = snapshot_models(run, val_checkpoint)
    assert max(RunDir(run).snapshot_steps()) in models  # last.pt was saved at the end
    progress = []
    result = head_trajectories(
        run, val_checkpoint, sentences=6, progress=lambda f, w: progress.append(f)
    )
    assert progress[-1] == 1.0 and progress == sorted(progress)
    table = result.frame("validation")
    assert not table.empty and set(table["step"]) == {models and max(models)}
    cross = table[table["kind"] == "cross"]
    assert cross["aer"].between(0, 1).all()
    assert table[table["kind"] != "cross"]["aer"].isna().all()
    assert "aer" in result.available()["validation"]
    cached = head_trajectories(run, val_checkpoint, sentences=6, validation="cached")
    assert cached.computed == 0 and not cached.pending


def test_a_model_without_a_validation_split_is_a_note_not_an_error(runs_env, tiny_run):
    result = head_trajectories(tiny_run, sentences=5)
    assert result.frame("validation").empty
    assert any("validation" in n for n in result.notes)
    assert not result.frame("probes").empty


def test_cached_mode_lists_the_steps_still_to_measure(runs_env, tiny_run):
    result = trajectories(tiny_run, validation="cached")
    assert result.pending == result.model_steps and result.model_steps


def test_a_bpe_run_has_trajectories(runs_env, bpe_run):
    result = head_trajectories(bpe_run, validation="off")
    assert result.steps and not result.notes
    assert set(result.frame()["kind"]) == set(KINDS)


def test_history_of_a_checkpoint(tiny_run, tmp_path):
    assert history_of(tiny_run / "last.pt") == tiny_run
    lone = tmp_path / "lone.pt"
    shutil.copy(tiny_run / "last.pt", lone)
    assert history_of(lone) is None


def test_probe_aer_only_for_a_gold_pair(home_translation):
    t, maps = home_translation
    assert probe_head_aer([maps]) is None  # "i'm home ." is not in the gold set
    gold = SentenceMaps(
        maps.encoder[:, :, :3, :3],
        maps.decoder_self[:, :, :3, :3],
        maps.cross[:, :, :3, :3],
        ["hello", ".", "<eos>"],
        ["bonjour", ".", "<eos>"],
        ["<bos>", "bonjour", "."],
    )
    aer = probe_head_aer([gold])
    assert aer is not None and len(aer) == maps.cross.shape[0] * maps.cross.shape[1]
    assert all(0 <= v <= 1 for v in aer.values())


# ----------------------------------------------------------------------------- reading them


def table_of(values: dict, steps=(10, 20, 30, 40), kind="encoder", metric="entropy"):
    """A trajectory table: {head: [value per step]} of one layer."""
    rows = []
    for head, series in values.items():
        for step, v in zip(steps, series):
            rows.append({"step": step, "kind": kind, "layer": 0, "head": head, metric: v})
    return pd.DataFrame(rows)


def test_largest_change_step():
    t = table_of({0: [0.0, 0.1, 0.9, 1.0], 1: [1.0, 0.2, 0.1, 0.1]})
    marks = largest_change(t, "entropy").set_index("head")
    assert marks.loc[0, "step"] == 30 and marks.loc[0, "change"] == pytest.approx(0.8)
    assert marks.loc[1, "step"] == 20 and marks.loc[1, "change"] == pytest.approx(-0.8)
    assert largest_change(table_of({0: [1.0]}, steps=(10,)), "entropy").empty


def test_step_difference_puts_the_changed_heads_first():
    t = table_of({0: [0.5, 0.5, 0.5, 0.6], 1: [0.5, 0.5, 0.5, 0.1], 2: [0.5] * 4})
    diff = step_difference(t, 10, 40, "entropy")
    assert diff["head"].tolist() == [1, 0, 2]
    assert diff["b_minus_a"].tolist() == pytest.approx([-0.4, 0.1, 0.0])


def test_the_difference_table_lists_heads_as_the_maps_do_in_words():
    """The table under the difference grid had a raw b_minus_a column and another order."""
    t = table_of({0: [0.5, 0.5, 0.5, 0.6], 1: [0.5, 0.5, 0.5, 0.1], 2: [0.5] * 4})
    t = pd.concat([t, table_of({0: [0.1] * 4}, kind="cross")])  # another kind: left out
    maps = MapDifference(np.zeros((1, 3, 2, 2)), ["a", "b"], ["x", "y"], [], "")
    maps.order = [(0, 2, 0.3), (0, 0, 0.2), (0, 1, 0.1)]  # the map of head 2 moved most
    table = heads_like_the_maps(step_difference(t, 10, 40, "entropy"), maps, "encoder")
    assert table["head"].tolist() == [2, 0, 1]  # the grid's order, not the entropy's
    assert list(table.columns) == ["layer", "head", "a", "b", "B − A", "map change (mean |B − A|)"]
    assert table["map change (mean |B − A|)"].tolist() == [0.3, 0.2, 0.1]


def test_map_difference_orders_heads_and_names_a_length_change(home_translation):
    _, maps = home_translation
    b = SentenceMaps(**{**vars(maps), "cross": maps.cross.copy()})
    b.cross[1, 2] = 0.0
    b.cross[0, 1, 0] = 0.0
    d = map_difference(maps, b, "cross")
    assert (d.order[0][:2], d.order[1][:2]) == ((1, 2), (0, 1))
    assert d.order[-1][2] == 0.0 and d.note == ""
    shorter = SentenceMaps(
        **{**vars(maps), "cross": maps.cross[:, :, :-1], "output_tokens": maps.output_tokens[:-1]}
    )
    assert "differ in length" in map_difference(shorter, b, "cross").note
    with pytest.raises(ValueError):
        map_difference(maps, b, "nonsense")


def stage_table(entropy, diagonal):
    """A cross-heads table over steps 1..n with these mean entropies and diagonalities."""
    steps = range(1, len(entropy) + 1)
    rows = [
        {"step": s, "kind": "cross", "layer": 0, "head": 0, "entropy": e, "diagonal": d}
        for s, e, d in zip(steps, entropy, diagonal)
    ]
    return pd.DataFrame(rows)


def test_stages_go_lm_then_word_by_word_then_reordering():
    found = stages(stage_table([2.0, 1.9, 1.0, 0.6, 0.5, 0.5], [0.3, 0.3, 0.6, 0.8, 0.7, 0.7]))
    assert found.stage == [STAGES[0]] * 2 + [STAGES[1]] * 2 + [STAGES[2]] * 2
    assert found.seen == list(STAGES) and "not seen" not in found.summary()


def test_the_stage_bands_are_named_in_the_legend_never_in_labels_that_collide():
    """Two steps of one stage made two labels side by side (they overlapped); each stage is a
    legend entry of its band's colour, below the plot, in the order the stages came."""
    from core.figures.trajectories import STAGE_COLORS, stage_figure

    found = stages(stage_table([2.0, 1.9, 1.0, 0.6, 0.5, 0.5], [0.3, 0.3, 0.6, 0.8, 0.7, 0.7]))
    fig = stage_figure(found)
    assert not fig.layout.annotations
    bands = [t for t in fig.data if t.name.startswith("band: ")]
    assert [t.name for t in bands] == [f"band: {s}" for s in STAGES]
    assert [t.marker.color for t in bands] == [STAGE_COLORS[s] for s in STAGES]
    assert fig.layout.legend.yref == "container"


def test_stages_say_what_a_run_did_not_reach():
    found = stages(stage_table([2.0, 1.0, 0.5, 0.4], [0.3, 0.6, 0.7, 0.8]))
    assert STAGES[2] not in found.seen and "not seen: reordering" in found.summary()
    assert stages(stage_table([2.0, 1.0], [0.3, 0.6])) is None


def test_specialisation_step():
    rows = [
        {"step": s, "kind": "encoder", "layer": 0, "head": 0, "previous": p, "diagonal": 0.1}
        | {"special": 0.1}
        for s, p in ((10, 0.2), (20, 0.7), (30, 0.3), (40, 0.6), (50, 0.8))
    ]
    heads = specialisation(pd.DataFrame(rows))
    assert heads.loc[0, "since"] == 40 and "previous" in heads.loc[0, "pattern"]


# ----------------------------------------------------------------------------- the command


def test_command_prints_json_lines(runs_env, tiny_run, capsys):
    assert command.main(["--run", str(tiny_run), "--probes-only"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    head, records = lines[0], lines[1:]
    assert head["steps"] == RunDir(tiny_run).snapshot_steps()
    assert "stages" in head and head["available"]["probes"]
    assert {r["basis"] for r in records} == {"probes"}
    assert all(r["aer"] is None for r in records)


@pytest.mark.parametrize(
    "argv",
    [
        ["--run", "/no/such/dir"],
        ["--checkpoint", "/no/such.pt"],
        ["--checkpoint", __file__],
        ["--run", ".", "--sentences", "0"],
    ],
)
def test_command_bad_input_is_one_line_and_status_2(runs_env, argv, capsys):
    assert command.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
