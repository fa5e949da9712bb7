"""Per-layer weight and gradient norms (each metrics record) and weight histograms (each
evaluation), so a user sees a layer die or explode.

Groups: the two embeddings, each encoder and decoder layer, the output layer. Norms are
the L2 norm over all of a group's parameters (weights) and of their gradients from the
last step. Histograms count a group's weights in fixed bins, so evaluations compare.
"""

from __future__ import annotations

import torch
from torch import nn

HIST_EDGES = [round(-1.0 + 0.05 * i, 2) for i in range(41)]  # 40 bins over [-1, 1]


def layer_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """The model's parameters by group, in the order of the forward pass."""
    groups = {
        "source embedding": list(model.encoder.embedding.parameters()),
        "target embedding": list(model.decoder.embedding.parameters()),
    }
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            groups[f"{side} {i}"] = list(layer.parameters())
    groups["output layer"] = list(model.decoder.dense.parameters())
    return groups


@torch.no_grad()
def layer_norms(model: nn.Module) -> dict[str, dict[str, float]]:
    """{"weights": {group: norm}, "grads": {group: norm of the last step's gradients}}."""
    weights, grads = {}, {}
    for name, params in layer_groups(model).items():
        weights[name] = float(torch.linalg.vector_norm(torch.cat([p.flatten() for p in params])))
        gs = [p.grad.flatten() for p in params if p.grad is not None]
        if gs:
            grads[name] = float(torch.linalg.vector_norm(torch.cat(gs).float()))
    return {"weights": weights, "grads": grads}


@torch.no_grad()
def weight_histograms(model: nn.Module) -> dict:
    """{"edges": HIST_EDGES, "counts": {group: [below, 40 bins, above]}} of the weights."""
    edges = torch.tensor(HIST_EDGES)
    counts = {}
    for name, params in layer_groups(model).items():
        w = torch.cat([p.detach().float().flatten().cpu() for p in params])
        bins = torch.bucketize(w, edges, right=True)  # 0: below -1, 41: above 1
        counts[name] = torch.bincount(bins, minlength=len(HIST_EDGES) + 1).tolist()
    return {"edges": HIST_EDGES, "counts": counts}
