"""Per-layer weight and gradient norms and weight histograms, logged and charted."""

from __future__ import annotations

import torch

from core.figures.layers import histogram_figure, histogram_groups, norms_figure
from core.places import runs_root
from core.runs.run_dir import RunDir
from core.training.monitor import HIST_EDGES, layer_groups, layer_norms, weight_histograms
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
    hist = weight_histograms(model)
    assert hist["edges"] == HIST_EDGES and len(hist["counts"]["decoder 1"]) == len(HIST_EDGES) + 1
    for name, params in groups.items():
        assert sum(hist["counts"][name]) == sum(p.numel() for p in params)


def test_a_run_logs_them_and_the_train_page_charts_them(tmp_path, jobs_env):
    out = runs_root() / "layers"
    assert train_tiny(out, "--epochs", "20", "--num-train", "24", "--num-val", "6") == 0
    records = RunDir(out).read_metrics()
    train = [r for r in records if r["record"] == "train"]
    assert all(set(r["layer_norms"]) == {"weights", "grads"} for r in train)
    assert histogram_groups(records)[-1] == "output layer"
    fig = norms_figure(records, "grads")
    assert len(fig.data) == len(train[0]["layer_norms"]["grads"])
    heat = histogram_figure(records, "encoder 0")
    assert len(heat.data[0].z) == sum("histograms" in r for r in records)
    assert abs(sum(heat.data[0].z[0]) - 1) < 1e-9
    at = train_page("layers")
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("weight norm per layer" in t for t in titles)
    assert any("weights of source embedding at each evaluation" in t for t in titles)
