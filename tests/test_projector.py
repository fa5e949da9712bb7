"""Where tokens live (core.attention.projector, ``python -m core.project``, the Attention
page's section): PCA is exact, neighbours are the most similar, the size is checked before
anything is computed, and the page, the command and the library agree. (That the points are
each model's own states, for every family: tests/test_conformance.py.)"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from core import project as project_cmd
from core.attention import projector
from core.attention.projector import ALL_LAYERS, ProjectionError, project
from core.measure.progress import TimeLimit, time_limit
from core.model.studio_model import StudioModel


@pytest.fixture(scope="module")
def val_model(val_checkpoint):
    return StudioModel.load(val_checkpoint)


def test_the_decoder_can_read_the_models_own_translations(val_model):
    """Issue 51, item 7: the projector offered only the references on the decoder side."""
    from core.model.checked_translation import translate_sentence

    read = projector.sentences_of(val_model, 6, reads="translation")
    refs = projector.sentences_of(val_model, 6)
    assert read.sources == refs.sources  # (this small model translates these six as written)
    for s in (0, 3):
        words = [val_model.source_tokens(read.sources[s])[:-1]]  # without <eos>
        t = translate_sentence(val_model, " ".join(words[0]))
        assert read.targets[s] == val_model.decoder_inputs(list(t.out_ids))
        assert read.texts[s].endswith("→ " + " ".join(val_model.target_words(t.out_ids)))
    result = project(val_model, "decoder", 1, sentences=read)
    s, top = 3, 1
    rec = val_model.forced(read.sources[s], [*read.targets[s][1:], val_model.eos_id])
    rows = (result.sentence == s) & (result.layer == top)
    got = torch.from_numpy(result.vectors[rows]).float()
    assert torch.allclose(got, rec.self_inputs[top][0].half().float(), atol=1e-3)
    with pytest.raises(ProjectionError, match="the decoder reads one of"):
        projector.sentences_of(val_model, 6, reads="both")


def test_the_command_and_the_page_read_the_models_own_translations(
    studio_dirs, val_checkpoint, val_model, capsys
):
    import shutil

    from tests.helpers import assert_clean, run_page_script

    args = ["--checkpoint", str(val_checkpoint), "--sentences", "6", "--side", "decoder"]
    assert project_cmd.main([*args, "--decoder-reads", "translation"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    result = project(val_model, "decoder", ALL_LAYERS, sentences=6, reads="translation")
    assert lines[: len(result.tokens)] == result.rows()
    shutil.copy(val_checkpoint, studio_dirs["checkpoints"] / "fra-eng-small.pt")
    query = {"section": "project", "space_sentences": "50", "space_side": "decoder"}
    at = run_page_script("attention.py", query)
    at.radio(key="space_reads").set_value("translation").run()
    assert_clean(at)
    assert at.query_params["space_reads"] == "translation" and at.get("plotly_chart")


def test_pca_is_exact_and_its_axes_fixed(val_model):
    result = project(val_model, "encoder", 1, "pca", 3, 6)
    x = torch.from_numpy(result.vectors).double()
    centred = (x - x.mean(0)).numpy()
    _, s, vh = np.linalg.svd(centred, full_matrices=False)
    assert result.explained == pytest.approx(list(s[:3] ** 2 / (s**2).sum()), abs=1e-3)
    for k in range(3):  # the same axis up to the sign the projector fixes
        axis = centred @ vh[k]
        assert abs(np.corrcoef(axis, result.coords[:, k])[0, 1]) > 0.999
    coords, _ = projector.pca(-torch.from_numpy(result.vectors).float(), 3)
    loads = projector.pca(torch.eye(4) * torch.tensor([3.0, 2.0, 1.0, 0.5]), 2)[0]
    assert (loads.max(0) > 0).all() and coords.shape == (len(result.tokens), 3)


def test_neighbours_are_the_most_similar_points_of_the_same_layer(val_model):
    result = project(val_model, "decoder", ALL_LAYERS, sentences=6)
    index = result.index_of(2, 1, 1)
    near = result.neighbours(index, 5)
    layer1 = np.flatnonzero((result.layer == 1) & (np.arange(len(result.tokens)) != index))
    x = torch.from_numpy(result.vectors[layer1]).float()
    sims = torch.nn.functional.cosine_similarity(
        x, torch.from_numpy(result.vectors[index]).float()[None]
    )
    best = layer1[sims.argsort(descending=True)[:5].numpy()]
    assert [n["index"] for n in near] == list(best)
    assert [n["similarity"] for n in near] == sorted((n["similarity"] for n in near), reverse=True)
    assert all(n["layer"] == 1 for n in near) and result.index_of(99, 0, 0) is None


def test_the_size_is_checked_before_anything_is_computed(val_model, monkeypatch):
    monkeypatch.setattr(projector.budget, "PROJECTION_BYTES", 5_000)
    monkeypatch.setattr(projector, "representations", lambda *a: pytest.fail("computed"))
    with pytest.raises(ProjectionError, match="choose at most .* sentences or one layer"):
        project(val_model, "encoder", ALL_LAYERS, sentences=6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"side": "middle"}, "side is one of"),
        ({"method": "tsne"}, "method is one of"),
        ({"dims": 4}, "2 or 3"),
        ({"sentences": 0}, "between 1 and"),
        ({"layer": 7}, "layers 0 .its input. to 2"),
    ],
)
def test_bad_settings_are_one_line(val_model, kwargs, message):
    with pytest.raises(ProjectionError, match=message):
        project(val_model, **({"sentences": 6} | kwargs))


def test_the_command_prints_the_library_points(val_checkpoint, val_model, capsys):
    args = ["--checkpoint", str(val_checkpoint), "--sentences", "6", "--layer", "2"]
    assert project_cmd.main([*args, "--pick", "1:2", "--neighbours", "3"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    result = project(val_model, "encoder", 2, sentences=6)
    assert lines[: len(result.tokens)] == result.rows()
    assert lines[-2] == result.summary() | {"model": str(val_checkpoint)}
    picked = result.index_of(1, 2, 2)
    assert lines[-1] == {"picked": result.point(picked), "neighbours": result.neighbours(picked, 3)}
    assert set(lines[0]) == {"side", "layer", "sentence", "position", "token", "x", "y"}
    for bad in (["--layer", "9"], ["--pick", "99:0"], ["--sentences", "0"], ["--neighbours", "0"]):
        assert project_cmd.main([*args[:4], *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_a_model_without_validation_sentences_is_one_line(tiny_checkpoint, capsys):
    assert project_cmd.main(["--checkpoint", str(tiny_checkpoint)]) == 2
    assert "validation" in capsys.readouterr().err


def test_the_figure_keeps_typed_words_as_text_and_each_point_its_index(val_model):
    from core.figures.projector import projection_figure

    result = project(val_model, "encoder", ALL_LAYERS, sentences=6)
    result.tokens[0], result.texts[0] = "<b>x</b>", "<i>typed</i> → y"
    near = [n["index"] for n in result.neighbours(0, 3)]
    for colour in projector.COLOURS:
        fig = projection_figure(result, colour, 0, near)
        hover = " ".join(str(h) for t in fig.data for h in t.hovertext)
        assert "<b>x</b>" not in hover and "&lt;b&gt;x&lt;/b&gt;" in hover and "<i>" not in hover
        drawn = sorted(int(r[0]) for t in fig.data[: len(fig.data) - 2] for r in t.customdata)
        assert drawn == list(range(len(result.tokens)))  # every point once, with its index
        assert [int(v) for v in fig.data[-1].customdata[0]] == [0, 0, 0, 0]
    assert "PC1 ·" in fig.layout.xaxis.title.text
    flat = project(val_model, "encoder", 2, "pca", 3, 6)
    assert projection_figure(flat, "token").data[0].type == "scatter3d"


def test_a_colour_bar_puts_the_legend_below_never_on_it(val_model):
    """Issue 53, item 8: the 3-D projector's legend sat on its colour bar."""
    from core.figures.projector import projection_figure

    flat = project(val_model, "encoder", 2, "pca", 3, 6)
    near = [n["index"] for n in flat.neighbours(0, 3)]
    for colour in ("position", "sentence"):
        fig = projection_figure(flat, colour, 0, near)
        assert fig.data[0].marker.showscale and fig.layout.legend.orientation == "h"
    assert projection_figure(flat, "token", 0, near).layout.legend.orientation is None


@pytest.mark.slow
def test_umap_is_seeded_so_the_page_and_the_command_agree(val_model):
    pytest.importorskip("umap")
    a = project(val_model, "encoder", ALL_LAYERS, "umap", 2, 6)
    b = project(val_model, "encoder", ALL_LAYERS, "umap", 2, 6)
    assert a.coords.shape == (len(a.tokens), 2) and np.isfinite(a.coords).all()
    assert np.array_equal(a.coords, b.coords) and a.explained == []


def test_the_attention_page_projects_picks_and_exports(studio_dirs, val_checkpoint):
    import shutil

    from tests.helpers import assert_clean, run_page_script

    shutil.copy(val_checkpoint, studio_dirs["checkpoints"] / "fra-eng-small.pt")
    query = {"section": "project", "space_sentences": "6", "space_layer": "all"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "Where encoder tokens live: every layer, 6 sentences" in spec["layout"]["title"]["text"]
    at.selectbox(key="space_sentence").set_value(2).run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert len(table) == projector.NEIGHBOURS and (table["similarity"].diff().dropna() <= 0).all()
    assert at.query_params["space_pick"] == "2:0:2"  # the last layer when all are shown
    at.selectbox(key="space_colour").set_value("layer").run()
    at.selectbox(key="space_side").set_value("decoder").run()
    assert_clean(at)
    assert at.query_params["space_side"] == "decoder" and at.query_params["space_colour"] == "layer"
    assert any("Every point as CSV" in b.label for b in at.get("download_button"))
    at.selectbox(key="space_dims").set_value(3).run()
    assert_clean(at)
    assert json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["type"] == "scatter3d"
    at.selectbox(key="space_sentences").set_value(1000).run()
    assert_clean(at)
    assert not at.get("plotly_chart")  # more than AUTOMATIC sentences: behind a button
    at.button(key="space_go").click().run()
    assert_clean(at)  # tiny.tsv has 6 validation sentences: all 6 are shown
    assert at.get("plotly_chart")


def test_a_url_alone_never_starts_umap_or_a_thousand_sentences(studio_dirs, val_checkpoint):
    """Issue 49, item 6: UMAP, or more than 200 sentences, runs only behind a button, in the
    server's heavy slot (a second session is told the slot is taken), and the URL's count is
    one of the page's few choices (each a cache key)."""
    import shutil

    from tests.helpers import assert_clean, heavy_slot_held, run_page_script

    shutil.copy(val_checkpoint, studio_dirs["checkpoints"] / "fra-eng-small.pt")
    query = {"section": "project", "space_method": "umap", "space_sentences": "317"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert at.selectbox(key="space_sentences").value == 500  # 317 asked: the next choice
    assert not at.get("plotly_chart") and at.button(key="space_go")
    with heavy_slot_held():
        at.button(key="space_go").click().run()
        assert_clean(at)
        assert any("one runs at a time" in w.value for w in at.warning)
        assert not at.get("plotly_chart")


def test_a_click_on_a_point_picks_it(studio_dirs, val_checkpoint):
    import shutil

    from tests.helpers import assert_clean, run_page_script

    shutil.copy(val_checkpoint, studio_dirs["checkpoints"] / "fra-eng-small.pt")
    at = run_page_script("attention.py", {"section": "project", "space_sentences": "6"})
    at.session_state["space_click"] = (4, 1, 2)  # what the chart's on_select leaves
    at.run()
    assert_clean(at)
    assert at.query_params["space_pick"] == "4:1:2"
    assert at.selectbox(key="space_sentence").value == 4
    assert at.selectbox(key="space_position").value == 1


# (beside the other UMAP test: its first fit compiles umap-learn's code, once per worker)
def test_umaps_layout_checks_the_limit_at_every_epoch():
    """Audit: UMAP's fit was one call no check could stop, so one begun a second before the
    limit ran to its end while the others waited: its layout's epochs now check it (through
    the progress bar it writes to, ``projector.EpochChecks``), the figures unchanged."""
    pytest.importorskip("umap")
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(0))
    checks = []

    def clock() -> float:  # the limit passes at the 20th check
        checks.append(1)
        return 0.0 if len(checks) < 20 else 1e9

    with time_limit(1, clock=clock), pytest.raises(TimeLimit):
        projector.umap_coords(x, 2)
    assert len(checks) == 1 + 20  # the limit set, then stopped at the 20th check, mid-layout
    with time_limit(1e6):
        checked_fit = projector.umap_coords(x, 2)
    import umap

    knn = (*projector.neighbours(x, 15), None)  # the neighbours found here, as umap-learn takes
    plain = umap.UMAP(n_components=2, random_state=0, n_neighbors=15, precomputed_knn=knn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = plain.fit_transform(x.numpy())
    assert np.array_equal(checked_fit, plain.astype(np.float32))  # the checks change nothing


def test_umaps_neighbours_are_the_exact_ones_found_chunk_by_chunk_within_the_limit(monkeypatch):
    """Audit: UMAP's neighbour search (one call; NN-descent past 4,096 points) checked no
    limit. The studio's is exact (sklearn's distances, itself first) and checks it per chunk."""
    from sklearn.metrics import pairwise_distances

    x = torch.randn(300, 16, generator=torch.Generator().manual_seed(1))
    x[7] = x[3]  # a token at the same place twice: itself still first
    monkeypatch.setattr(projector, "KNN_BYTES", 8 * 300 * 50)  # chunks of 50 rows: 6 checks
    idx, dist = projector.neighbours(x, 15)
    d = pairwise_distances(x.double().numpy())
    assert (idx[:, 0] == np.arange(300)).all() and {idx[3, 1], idx[7, 1]} == {3, 7}
    assert np.allclose(dist, np.sort(d, axis=1)[:, :15], atol=1e-6)
    checks = []

    def clock() -> float:
        checks.append(1)
        return 0.0 if len(checks) < 4 else 1e9

    with time_limit(1, clock=clock), pytest.raises(TimeLimit):
        projector.neighbours(x, 15)
    assert len(checks) == 4  # the limit set, then stopped at the third chunk
