"""Per-layer weight and gradient norms and distributions, logged and charted as TensorBoard does."""

from __future__ import annotations

import math

import pytest
import torch

from core.figures.layers import (
    distribution_figure,
    histogram_figure,
    histogram_groups,
    histogram_overlay_figure,
    norms_figure,
)
from core.places import runs_root
from core.runs.run_dir import RunDir
from core.training.monitor import (
    BASIS_POINTS,
    FINE,
    HIST_BINS,
    distributions,
    layer_groups,
    layer_norms,
    summary,
)
from tests.helpers import train_tiny
from tests.test_app_train import train_page


def test_norms_and_histograms_are_those_of_the_parameters(random_model):
    model = random_model[0]
    groups = layer_groups(model)
    assert list(groups)[:2] == ["source embedding", "target embedding"]
    assert sum(p.numel() for ps in groups.values() for p in ps) == sum(
        p.numel() for p in model.parameters()
    ) - sum(p.numel() for n, p in model.named_parameters() if "final_ln" in n)
    model.zero_grad()
    src = torch.randint(4, 11, (2, 5))
    tgt = torch.randint(4, 11, (2, 6))
    model.loss(src, tgt[:, :-1], tgt[:, 1:]).backward()
    norms = layer_norms(model)
    w = torch.cat([p.flatten() for p in groups["encoder 0"]])
    assert abs(norms["weights"]["encoder 0"] - torch.linalg.vector_norm(w).item()) < 1e-5
    g = torch.cat([p.grad.flatten() for p in groups["output layer"]])
    assert abs(norms["grads"]["output layer"] - torch.linalg.vector_norm(g).item()) < 1e-5
    dist = distributions(model)
    for name, params in groups.items():
        w = torch.cat([p.detach().flatten() for p in params]).double()
        d = dist["weights"][name]
        assert d["num"] == w.numel() == sum(d["counts"]) and len(d["counts"]) == HIST_BINS
        bin_width = (w.max() - w.min()).item() / (HIST_BINS * FINE)  # read from a fine histogram
        ordered, n = w.sort().values, w.numel()
        for bp, got in zip(BASIS_POINTS, d["percentiles"]):  # within an order statistic and a bin
            k = bp / 10_000 * (n - 1)
            low = ordered[max(0, math.floor(k) - 1)].item() - bin_width
            high = ordered[min(n - 1, math.ceil(k) + 1)].item() + bin_width
            assert low - 1e-6 <= got <= high + 1e-6, (name, bp)
        assert d["percentiles"][0] == pytest.approx(w.min().item(), rel=1e-5)  # exact ends
        assert d["percentiles"][-1] == pytest.approx(w.max().item(), rel=1e-5)
        assert d["sum_squares"] == pytest.approx(w.square().sum().item(), rel=1e-5)
    g = torch.cat([p.grad.flatten() for p in groups["output layer"]])
    assert dist["grads"]["output layer"]["percentiles"][-1] == pytest.approx(
        g.max().item(), rel=1e-5
    )


def test_a_distribution_is_auto_ranged_where_fixed_bins_saw_three():
    """Weights of scale 1e-3 fell into three of the old fixed [-1, 1] bins; the auto-ranged
    histogram spreads them over its own range, and the percentiles are those of a normal."""
    values = torch.randn(200_000, generator=torch.Generator().manual_seed(0)) * 1e-3
    d = summary(values)
    assert sum(c > 0 for c in d["counts"]) >= HIST_BINS - 4  # most bins hold values
    sigma = [d["percentiles"][i] / 1e-3 for i in (1, 2, 3, 5, 6, 7)]  # ±1.5σ, ±1σ, ±0.5σ points
    assert sigma == pytest.approx([-1.5, -1.0, -0.5, 0.5, 1.0, 1.5], abs=0.02)
    same = summary(torch.full((10,), 0.25))  # one value: one bin, no division by a zero range
    assert same["counts"] == [10] and same["percentiles"] == [0.25] * 9


def test_the_figures_draw_tensorboards_bands_and_overlaid_histograms(random_model):
    records = []
    for step in (10, 20, 30):
        records.append(
            {"record": "eval", "step": step, "distributions": distributions(random_model[0])}
        )
    fig = distribution_figure(records, "encoder 0", "weights")
    assert [t.name for t in fig.data if t.showlegend is not False] == [
        "min to max",
        "6.7 to 93.3 %",
        "15.9 to 84.1 %",
        "30.9 to 69.1 %",
        "median",
    ]
    pct = records[-1]["distributions"]["weights"]["encoder 0"]["percentiles"]
    assert (
        fig.data[0].y[-1] == pct[0] and fig.data[1].y[-1] == pct[8] and fig.data[-1].y[-1] == pct[4]
    )
    assert list(fig.data[-1].x) == [10, 20, 30]
    overlay = histogram_overlay_figure(records, "encoder 0", "weights")
    assert len(overlay.data) == 3
    width = overlay.data[0].x[1] - overlay.data[0].x[0]
    assert sum(overlay.data[0].y) * width == pytest.approx(1.0)  # a density


def test_a_run_logs_them_and_the_train_page_charts_them(tmp_path, jobs_env):
    out = runs_root() / "layers"
    assert train_tiny(out, "--epochs", "20", "--num-train", "24", "--num-val", "6") == 0
    records = RunDir(out).read_metrics()
    train = [r for r in records if r["record"] == "train"]
    assert all(set(r["layer_norms"]) == {"weights", "grads"} for r in train)
    assert histogram_groups(records)[-1] == "output layer"
    fig = norms_figure(records, "grads")
    assert len(fig.data) == len(train[0]["layer_norms"]["grads"])
    evals = [r for r in records if "distributions" in r]
    assert evals and all(set(r["distributions"]) == {"weights", "grads"} for r in evals)
    assert len(distribution_figure(records, "encoder 0", "grads").data[-1].x) == len(evals)
    at = train_page("layers")
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert not any("weight norm per layer" in t for t in titles)  # closed: nothing built
    at.session_state["layers_open"] = True  # the user opens "Layers"
    at.run()
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("weight norm per layer" in t for t in titles)
    assert any("weights of source embedding" in t for t in titles)
    assert any("gradients of source embedding" in t for t in titles)
    at.radio(key="hist_mode").set_value("Histograms").run()
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("weights of source embedding: histograms" in t for t in titles)


def test_a_run_from_before_distributions_still_shows_its_fixed_bin_histograms():
    edges = [round(-1.0 + 0.05 * i, 2) for i in range(41)]
    records = [
        {
            "record": "eval",
            "step": 5,
            "histograms": {"edges": edges, "counts": {"encoder 0": [0] * 20 + [3, 5] + [0] * 20}},
        }
    ]
    assert histogram_groups(records) == ["encoder 0"]
    heat = histogram_figure(records, "encoder 0")
    assert abs(sum(heat.data[0].z[0]) - 1) < 1e-9


def test_the_largest_models_distributions_fit_the_metrics_estimate():
    """An evaluation record of a 24 + 24-layer model, gradients included, stays within what
    the run's budget counts for it (``run_bytes.eval_record_bytes``)."""
    import json

    from core.model.config import MODEL_UPPER, ModelConfig
    from core.model.transformer import Transformer
    from core.runs.budget import RECORD_BYTES
    from core.runs.run_bytes import eval_record_bytes

    layers = {k: MODEL_UPPER[k] for k in ("num_encoder_layers", "num_decoder_layers")}
    layers["num_heads"] = 2
    config = ModelConfig(20, 20, d_model=8, d_ff=8, **layers)
    model = Transformer(config)
    src, tgt = torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 6))
    (model.loss(src, tgt[:, :-1], tgt[:, 1:]) * 1e-7).backward()  # tiny gradients: long numbers
    record = {"distributions": distributions(model)}
    assert len(record["distributions"]["grads"]) == 24 + 24 + 3
    assert len(json.dumps(record)) <= eval_record_bytes(layers) - RECORD_BYTES


def test_the_largest_circuit_scores_fit_the_metrics_estimate():
    """A decoder-only run's evaluation record also carries every head's three circuit scores
    (``core.training.circuits``): at the largest sizes they fit what the budget counts."""
    import json

    from core.model.config import MODEL_UPPER
    from core.runs.budget import RECORD_BYTES
    from core.runs.run_bytes import eval_record_bytes

    L, H = MODEL_UPPER["num_decoder_layers"], MODEL_UPPER["num_heads"]  # noqa: N806
    grid = [[0.1234] * H for _ in range(L)]  # 4 decimals, as the records keep them
    circuits = {"previous_token": grid, "duplicate_token": grid, "induction": grid}
    model = {"num_encoder_layers": 2, "num_decoder_layers": L, "num_heads": H}
    without = RECORD_BYTES + 2 * (2 + L + 3) * 512  # the distributions' share, as before
    assert len(json.dumps({"circuits": circuits})) <= eval_record_bytes(model) - without
