"""The language models on a CUDA GPU, against the same models on the CPU: translations, maps,
head removal re-run from a layer, and head importance (``python -m core.ablate --device``).
Skipped without a GPU (the CI machine has none; run where one is lent)."""

from __future__ import annotations

import json

import pytest
import torch

from core import ablate
from core.attention.importance import importance_for
from core.model.batched import forced_batch
from core.model.opened import open_model
from core.model.parts import DecodeSettings
from core.model.resumed import resumable
from tests import helpers
from tests.lm_tiny import LM_FAMILIES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")

SENTENCE = "the boy is tall ."


@pytest.fixture(params=LM_FAMILIES)
def pair(request, lm_models):
    """(the tiny model on the CPU, the same on the GPU), its family's folder."""
    folder = lm_models[request.param]
    return open_model(str(folder)), open_model(str(folder), "cuda"), folder


def test_a_language_model_translates_and_maps_alike_on_the_gpu(pair):
    cpu, gpu, _ = pair
    assert gpu.device.type == "cuda"
    settings = DecodeSettings(max_len=8)
    a, b = cpu.translate(SENTENCE, settings), gpu.translate(SENTENCE, settings)
    assert a.out_ids == b.out_ids
    for kind in ("encoder", "decoder_self", "cross"):
        x, y = getattr(a.attention, kind), getattr(b.attention, kind)
        assert torch.allclose(x, y.cpu(), atol=1e-4)


def test_running_again_from_a_layer_on_the_gpu_equals_the_cpus(pair):
    cpu, gpu, _ = pair
    encoded = [(cpu.source(SENTENCE).ids, cpu.target_ids("le garçon est grand ."))]
    again = []
    for m in (cpu, gpu):
        src, dec, _ = forced_batch(m, encoded)
        gate = torch.ones(m.cfg.num_heads, device=m.device)
        gate[0] = 0.0
        with torch.no_grad(), m.rows_gated({("decoder_self", 1): gate}):
            again.append(resumable(m, src, dec)[1]("decoder_self", 1).cpu())  # (1, T, D)
            assert torch.allclose(again[-1], m.hidden(src, dec).cpu(), atol=1e-5)
    assert torch.allclose(again[0], again[1], atol=1e-4)


def test_head_importance_on_the_gpu_measures_what_the_cpu_measures(
    pair, tmp_path, monkeypatch, capsys
):
    cpu, gpu, folder = pair
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    a = importance_for(cpu, folder, 4, precision="float32", refresh=True)
    b = importance_for(gpu, folder, 4, precision="float32", refresh=True)
    assert b.precision == "float32" and len(b.heads) == len(a.heads)
    for x, y in zip(a.heads, b.heads):
        assert x["delta_loss"] == pytest.approx(y["delta_loss"], abs=1e-4)
    command = ["--checkpoint", str(folder), "--sentences", "4", "--device", "cuda", "--refresh"]
    assert ablate.main(command) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["measured"] == "loss" and len(lines) == 1 + len(a.heads)
