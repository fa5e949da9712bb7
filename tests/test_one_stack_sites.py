"""Every site of a one-stack model's record (``core.model.sites``), as TransformerLens's
``run_with_cache`` gives them, checked against the model's own computation from ids on every
decoder-only and masked family of the conformance suite (tiny random models with their real
checkpoints' flags, ``tests/lm_tiny.py``): q and k (rotated where the family rotates them)
give the model's own weights, z is the weights times v, the stream between attention and
feed-forward plus what the feed-forward adds is the layer's output."""

from __future__ import annotations

import pytest
import torch

from core.model import lm_heads, lm_sites, sites
from core.model.architectures import ROPE, architecture_of, part
from core.model.hooks import any_on, capture, hooked, replace_with
from tests.lm_tiny import ENCODER_FAMILIES, LM_FAMILIES

PARTS = ("q", "k", "v", "rot_q", "rot_k", "scores", "pattern", "z", "out")  # of each attention
LAYER_PARTS = ("resid_mid", "mlp_in", "mlp_out", "ln1.scale", "ln2.scale")  # of each layer
IDS = [5, 9, 14, 7, 21, 30, 11, 8, 17, 6, 12]  # longer than Mistral's tiny window (6)


@pytest.fixture(scope="module", params=(*LM_FAMILIES, *ENCODER_FAMILIES))
def model(request, lm_loaded) -> torch.nn.Module:
    return lm_loaded[request.param].model


def site_names(points, layer: int) -> list[str]:
    """The sites of one layer a one-stack model has (rot_* only in a rotary family)."""
    names = [f"decoder.{layer}.self.{p}" for p in PARTS]
    names += [f"decoder.{layer}.{p}" for p in LAYER_PARTS]
    return [n for n in names if n in points]


def own_pass(model, ids=IDS):
    """({site: activation} of one forward from ids, the model's output, each layer's input
    and output (B, N, D))."""
    points = sites.install(model)
    names = [n for i in range(len(lm_sites.layers_of(model))) for n in site_names(points, i)]
    names += [n for n in ("decoder.ln_final.scale",) if n in points]
    seen: dict = {}
    x = torch.tensor([ids])
    hooks = hooked(points, [(n, capture(seen)) for n in names])
    with (
        torch.no_grad(),
        sites.LayerInputs(model) as inputs,
        sites.LastOutput(model) as last,
        hooks,
    ):
        o = model(input_ids=x, output_attentions=True, output_hidden_states=True)
    layer_in = [inputs.stream_in(name) for name in inputs.calls]
    layer_out = [*layer_in[1:], last.output]
    return seen, o, layer_in, layer_out


def test_every_site_is_there_with_its_shape(model):
    arch, config = architecture_of(model), model.config
    seen, o, _, _ = own_pass(model)
    H, Hkv, N = config.num_attention_heads, arch.kv_heads_of(config), len(IDS)
    D = config.hidden_size
    for i in range(len(lm_sites.layers_of(model))):
        p = f"decoder.{i}.self"
        Dh = seen[f"{p}.z"].size(-1)
        assert seen[f"{p}.q"].shape == (1, N, H, Dh)
        assert seen[f"{p}.k"].shape == seen[f"{p}.v"].shape == (1, N, Hkv, Dh)  # not repeated
        assert (f"{p}.rot_q" in seen) == (f"{p}.rot_k" in seen) == (arch.positions == ROPE)
        assert torch.equal(seen[f"{p}.pattern"], o.attentions[i])  # (B, H, N, N)
        assert seen[f"{p}.out"].shape == seen[f"decoder.{i}.mlp_out"].shape == (1, N, D)
        assert (f"decoder.{i}.resid_mid" in seen) == ("parallel" not in arch.quirks)


def test_q_and_k_give_the_models_own_weights_and_z_is_weights_times_v(model):
    arch, config = architecture_of(model), model.config
    H, Hkv = config.num_attention_heads, arch.kv_heads_of(config)
    seen, o, _, _ = own_pass(model)
    causal = arch.kind != "masked"
    for i in range(len(lm_sites.layers_of(model))):
        p = f"decoder.{i}.self"
        rebuilt = lm_heads.sequence_heads(model, IDS, i, causal=causal)  # the studio's own
        q = seen.get(f"{p}.rot_q", seen[f"{p}.q"])[0].transpose(0, 1)  # (H, N, Dh)
        k = seen.get(f"{p}.rot_k", seen[f"{p}.k"])[0].transpose(0, 1)  # (Hkv, N, Dh)
        assert torch.allclose(q, rebuilt.q, atol=1e-5) and torch.allclose(k, rebuilt.k, atol=1e-5)
        k = k.repeat_interleave(H // Hkv, dim=0)  # (H, N, Dh): each query head's
        scores = q @ k.transpose(-1, -2) * rebuilt.scale  # (H, N, N)
        if rebuilt.bias is not None:  # ALiBi
            scores = scores + rebuilt.bias
        if rebuilt.softcap:  # Gemma 2
            scores = rebuilt.softcap * torch.tanh(scores / rebuilt.softcap)
        scores = scores.masked_fill(~rebuilt.mask, torch.finfo(scores.dtype).min)
        pattern = o.attentions[i][0]  # (H, N, N) the model's own
        assert torch.allclose(scores.softmax(-1), pattern, atol=1e-5), (arch.model_type, i)
        v = seen[f"{p}.v"][0].repeat_interleave(H // Hkv, dim=1)  # (N, H, Dh)
        z = torch.einsum("hqk,khd->qhd", pattern, v)  # (N, H, Dh)
        assert torch.allclose(z, seen[f"{p}.z"][0], atol=1e-5), (arch.model_type, i)


def test_the_scores_are_what_the_softmax_makes_the_models_own_weights_of(model):
    """``scores`` (TransformerLens's ``hook_attn_scores``): their softmax is the model's own
    ``output_attentions`` within 1e-5, in one row and in a batch with padding; a key the mask
    hides scores the dtype's most negative value added (finite, not −inf)."""
    arch = architecture_of(model)
    H, N = model.config.num_attention_heads, len(IDS)
    seen, o, _, _ = own_pass(model)
    causal = arch.kind != "masked"
    for i in range(len(lm_sites.layers_of(model))):
        scores = seen[f"decoder.{i}.self.scores"]  # (1, H, N, N)
        assert scores.shape == (1, H, N, N) and torch.isfinite(scores).all()
        assert torch.allclose(scores.softmax(-1), o.attentions[i], atol=1e-5), arch.model_type
        hidden = ~lm_heads.sequence_heads(model, IDS, i, causal=causal).mask  # (N, N)
        assert causal == bool(hidden.any()) and (scores[0][:, hidden] < -1e30).all()
    points = sites.install(model)
    x = torch.tensor([IDS, [0, 0, 0, *IDS[3:]]])  # (2, N): the second row's first 3 padding
    mask = torch.tensor([[1] * N, [0, 0, 0] + [1] * (N - 3)])  # (2, N)
    padded: dict = {}
    names = [f"decoder.{i}.self.scores" for i in range(len(lm_sites.layers_of(model)))]
    with torch.no_grad(), hooked(points, [(n, capture(padded)) for n in names]):
        own = model(input_ids=x, attention_mask=mask, output_attentions=True).attentions
    for name, weights in zip(names, own):
        assert torch.allclose(padded[name].softmax(-1), weights, atol=1e-5), arch.model_type
        assert (padded[name][1, :, 3:, :3] < -1e30).all()  # padding hidden from real tokens


def test_the_stream_between_attention_and_mlp_adds_up_to_the_layers_output(model):
    arch = architecture_of(model)
    row = arch.stack()
    seen, _, layer_in, layer_out = own_pass(model)
    for i, layer in enumerate(lm_sites.layers_of(model)):
        x, out = layer_in[i], layer_out[i]  # (1, N, D)
        attn, mlp_in, mlp_out = (
            seen[f"decoder.{i}.{s}"] for s in ("self.out", "mlp_in", "mlp_out")
        )
        attention_norm = part(layer, row.self_attention.norm)
        if "parallel" in arch.quirks:  # x + attention + MLP, both reading one norm's output
            assert torch.allclose(x + attn + mlp_out, out, atol=1e-5)
            assert torch.allclose(attention_norm(x), mlp_in, atol=1e-5)
            continue
        mid = seen[f"decoder.{i}.resid_mid"]
        if arch.norm == "post":  # BERT: each sum normalised
            assert torch.allclose(attention_norm(x + attn), mid, atol=1e-5)
            assert torch.allclose(part(layer, row.mlp_norm)(mid + mlp_out), out, atol=1e-5)
            assert torch.allclose(mlp_in, mid)
            continue
        if "sandwich_norms" in arch.quirks:  # Gemma 2: the attention's output normalised again
            attn = part(layer, "post_attention_layernorm")(attn)
        assert torch.allclose(x + attn, mid, atol=1e-5), arch.model_type
        assert torch.allclose(mid + mlp_out, out, atol=1e-5), arch.model_type
        assert torch.allclose(part(layer, row.mlp_norm)(mid), mlp_in, atol=1e-5)


def test_writing_a_site_changes_the_model_and_its_own_value_changes_nothing(model):
    seen, o, _, _ = own_pass(model)
    points = sites.install(model)
    x = torch.tensor([IDS])
    for name in ("decoder.0.self.q", "decoder.0.self.k", "decoder.0.self.v", "decoder.0.mlp_out"):
        with torch.no_grad(), hooked(points, [(name, replace_with(seen[name].clone()))]):
            same = model(input_ids=x).logits
        other = torch.randn(seen[name].shape, generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), hooked(points, [(name, replace_with(other))]):
            changed = model(input_ids=x).logits
        assert torch.allclose(same, o.logits, atol=1e-5), name
        assert not torch.allclose(changed, o.logits, atol=1e-3), name
    assert not any_on()  # and with no hook on, each hook is one integer test


def test_each_norms_scale_is_what_it_divides_the_stream_by(model):
    arch = architecture_of(model)
    row = arch.stack()
    seen, _, layer_in, layer_out = own_pass(model)
    assert ("decoder.ln_final.scale" in seen) == (arch.norm == "pre")
    if arch.norm == "pre":  # the final norm divides the last layer's output
        x, norm = layer_out[-1], lm_sites.final_norm(model)
        rebuilt = normalised(norm, x, seen["decoder.ln_final.scale"], arch)
        with torch.no_grad():
            assert torch.allclose(rebuilt, norm(x), atol=1e-5), arch.model_type
    for i, layer in enumerate(lm_sites.layers_of(model)):
        names = [n for n in ("ln1", "ln2") if f"decoder.{i}.{n}.scale" in seen]
        if arch.norm == "post":  # BERT's norms divide sums, not the stream: no scale site
            assert names == []
            continue
        parallel = row.mlp_norm == row.self_attention.norm
        assert names == (["ln1"] if parallel else ["ln1", "ln2"]), arch.model_type
        inputs = {"ln1": layer_in[i], "ln2": seen.get(f"decoder.{i}.resid_mid")}
        for name, path in (("ln1", row.self_attention.norm), ("ln2", row.mlp_norm))[: len(names)]:
            x, scale = inputs[name], seen[f"decoder.{i}.{name}.scale"]  # (1, N, D), (1, N, 1)
            assert scale.shape == (*x.shape[:-1], 1)
            norm = part(layer, path)
            rebuilt = normalised(norm, x, scale, arch)
            with torch.no_grad():
                own = norm(x)
            assert torch.allclose(rebuilt, own, atol=1e-5), (arch.model_type, name)


def normalised(norm, x: torch.Tensor, scale: torch.Tensor, arch) -> torch.Tensor:
    """x (B, N, D) normalised by the scale a site read (B, N, 1) and the norm's own gain:
    (x - mean) / scale · w + b (LayerNorm), x / scale · gain (RMSNorm; Gemma's 1 + w, read
    off the norm of a vector of ones)."""
    if arch.norm_class != "RMSNorm":
        return (x - x.mean(-1, keepdim=True)) / scale * norm.weight + norm.bias
    ones = torch.ones_like(x)
    gain = norm(ones) * (1.0 + getattr(norm, arch.norm_eps)) ** 0.5  # 1 / scale of ones
    return x / scale * gain
