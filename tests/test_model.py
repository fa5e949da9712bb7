"""The Transformer: shapes, masks, equivalence with PyTorch's layers, fused == explicit,
and the training loss's fused output layer == PyTorch's cross-entropy (loss and gradients)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.model.blocks import MultiHeadAttention, attention, subsequent_mask
from core.model.config import ModelConfig
from core.model.output_loss import CHUNK_ROWS, projected_cross_entropy
from core.model.parts import AttentionMaps
from core.model.transformer import DecoderLayer, Encoder, EncoderLayer, Transformer, embedding
from tests import helpers
from tests.helpers import toy_model_config

ATOL = 1e-5


def test_d2l_encoder_shape():
    """The d2l chapter's check: a 2-block encoder on (2, 100) ids gives (2, 100, 24)."""
    cfg = ModelConfig(200, 200, d_model=24, num_heads=8, num_encoder_layers=2, d_ff=48, dropout=0.5)
    enc = Encoder(cfg).eval()
    src = torch.ones((2, 100), dtype=torch.long)
    src[0, 3:], src[1, 2:] = 0, 0  # valid lengths 3 and 2
    out, maps = enc(src, (src != 0)[:, None, None, :], need_weights=True)
    assert out.shape == (2, 100, 24)
    assert maps.shape == (2, 2, 8, 100, 100)


def test_masked_softmax_is_zero_past_valid_length():
    """Weights on keys past each sequence's valid length are exactly 0; rows sum to 1."""
    q, k = torch.randn(2, 1, 2, 4), torch.randn(2, 1, 4, 4)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    _, w = attention(q, k, k, mask[:, None, None, :])
    assert torch.all(w[0, ..., 2:] == 0) and torch.all(w[1, ..., 3:] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(2, 1, 2))


@pytest.mark.parametrize(
    "bad, reason",
    [
        (dict(d_model=30, num_heads=4), "divisible"),
        (dict(num_encoder_layers=0), "num_encoder_layers"),
        (dict(num_decoder_layers=0), "num_decoder_layers"),
        (dict(num_heads=0), "num_heads"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=float("nan")), r"dropout must be in \[0, 1\) \(got nan\)"),
        (dict(max_positions=1), r"max_positions must be at least 2 \(got 1\)"),
        (dict(pad_id=19), r"pad_id must be an id of both vocabularies \(got 19\)"),
        (dict(d_model=16.0), r"d_model must be a whole number \(got 16.0\)"),
        (dict(num_heads=True), r"num_heads must be a whole number \(got True\)"),
        (dict(norm_first="yes"), r"norm_first must be true or false \(got 'yes'\)"),
        (dict(dropout="0.1"), r"dropout must be a number \(got '0.1'\)"),
        (dict(d_ff=0), r"d_ff must be at least 1 \(got 0\)"),
    ],
)
def test_impossible_configs_are_refused(bad, reason):
    """Impossible settings raise a readable ValueError before anything is built."""
    with pytest.raises(ValueError, match=reason):
        Transformer(toy_model_config(**bad))


def copy_mha(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Copy our W_q, W_k, W_v, W_o into PyTorch's packed in_proj / out_proj."""
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        ref.out_proj.weight.copy_(ours.W_o.weight)
        ref.out_proj.bias.copy_(ours.W_o.bias)


def copy_ffn_norms(ours, ref, norms: list[str]) -> None:
    """Copy FFN weights and the AddNorm layer norms into a PyTorch layer."""
    with torch.no_grad():
        ref.linear1.load_state_dict(ours.ffn.dense1.state_dict())
        ref.linear2.load_state_dict(ours.ffn.dense2.state_dict())
        for i, name in enumerate(norms, start=1):
            getattr(ref, f"norm{i}").load_state_dict(getattr(ours, name).ln.state_dict())


def _attention_against_pytorch(need_weights: bool):
    """(ours, PyTorch's) output and weights of one MultiHeadAttention with the same weights."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, 0.0).eval()
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    copy_mha(ours, ref)
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    keep = torch.tensor([7, 4, 1])[:, None] > torch.arange(7)  # (B, Tk) True = real key
    out, w = ours(q, kv, kv, keep[:, None, None, :], need_weights=need_weights)
    ref_out, ref_w = ref(q, kv, kv, key_padding_mask=~keep, average_attn_weights=False)
    return (out, w), (ref_out, ref_w)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_matches_pytorch(need_weights):
    """Our MultiHeadAttention equals nn.MultiheadAttention with the same weights."""
    (out, _), (ref_out, _) = _attention_against_pytorch(need_weights)
    assert torch.allclose(out, ref_out, atol=ATOL)


def test_multihead_attention_weights_match_pytorch():
    """The per-head weights, when asked for, equal nn.MultiheadAttention's."""
    (_, w), (_, ref_w) = _attention_against_pytorch(need_weights=True)
    assert torch.allclose(w, ref_w, atol=ATOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_pytorch(norm_first):
    """EncoderLayer equals nn.TransformerEncoderLayer (ReLU, post-LN or pre-LN)."""
    torch.manual_seed(1)
    cfg = toy_model_config(norm_first=norm_first)
    ours = EncoderLayer(cfg)
    ref = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    copy_mha(ours.attention, ref.self_attn)
    copy_ffn_norms(ours, ref, ["addnorm1", "addnorm2"])
    x = torch.randn(2, 6, 16)
    keep = torch.tensor([6, 3])[:, None] > torch.arange(6)
    out, _ = ours(x, keep[:, None, None, :])
    ref_out = ref(x, src_key_padding_mask=~keep)  # training mode: no fast path
    assert torch.allclose(out, ref_out, atol=ATOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_pytorch(norm_first):
    """DecoderLayer equals nn.TransformerDecoderLayer with causal and memory masks."""
    torch.manual_seed(2)
    cfg = toy_model_config(norm_first=norm_first)
    ours = DecoderLayer(cfg)
    ref = nn.TransformerDecoderLayer(
        16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    copy_mha(ours.self_attention, ref.self_attn)
    copy_mha(ours.cross_attention, ref.multihead_attn)
    copy_ffn_norms(ours, ref, ["addnorm1", "addnorm2", "addnorm3"])
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mem_keep = torch.tensor([7, 2])[:, None] > torch.arange(7)
    causal = subsequent_mask(5)
    out, _, _ = ours(x, memory, mem_keep[:, None, None, :], causal[None, None])
    ref_out = ref(x, memory, tgt_mask=~causal, memory_key_padding_mask=~mem_keep)
    assert torch.allclose(out, ref_out, atol=ATOL)


def test_fused_path_equals_explicit_path(model_and_batch):
    """Logits are the same whether or not attention weights are asked for."""
    model, src, tgt = model_and_batch
    fast, none = model(src, tgt)
    slow, maps = model(src, tgt, need_weights=True)
    assert none is None and isinstance(maps, AttentionMaps)
    assert torch.allclose(fast, slow, atol=ATOL)


def test_attention_maps_shapes_masks_and_rows(model_and_batch):
    """(L, B, H, ., .) maps: causal decoder, no weight on padded source keys, rows sum to 1."""
    model, src, tgt = model_and_batch
    _, maps = model(src, tgt, need_weights=True)
    assert maps.encoder.shape == (2, 3, 4, 7, 7)
    assert maps.decoder_self.shape == (3, 3, 4, 6, 6)
    assert maps.cross.shape == (3, 3, 4, 6, 7)
    upper = ~subsequent_mask(6)
    assert torch.all(maps.decoder_self[..., upper] == 0)
    src_pad = (src == 0)[None, :, None, None, :]  # (1, B, 1, 1, S)
    assert torch.all(maps.cross.masked_select(src_pad.expand_as(maps.cross)) == 0)
    assert torch.all(maps.encoder.masked_select(src_pad.expand_as(maps.encoder)) == 0)
    for m in (maps.encoder, maps.decoder_self, maps.cross):
        assert torch.allclose(m.sum(-1), torch.ones(m.shape[:-1]), atol=1e-5)


def test_masked_loss_equals_full_cross_entropy(model_and_batch):
    """Projecting only real target positions gives the usual ignore-pad cross-entropy."""
    model, src, tgt = model_and_batch
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    logits, _ = model(src, tgt_in)
    ref = nn.functional.cross_entropy(
        logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1
    )
    assert torch.allclose(model.loss(src, tgt_in, tgt_out, 0.1), ref, atol=1e-6)


def test_padding_does_not_change_real_positions(model_and_batch):
    """Extra <pad> columns leave the logits of real positions unchanged."""
    model, src, tgt = model_and_batch
    base, _ = model(src, tgt)
    wide_src = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    wide, _ = model(wide_src, tgt)
    assert torch.allclose(base, wide, atol=ATOL)


def test_positional_encoding_table():
    """Sinusoids as in the paper: P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(...)."""
    enc = Encoder(toy_model_config())
    table = enc.pos_encoding.table
    i, j, d = 5, 3, 16
    assert torch.isclose(table[i, 2 * j], torch.sin(torch.tensor(i / 10000 ** (2 * j / d))))
    assert torch.isclose(table[i, 2 * j + 1], torch.cos(torch.tensor(i / 10000 ** (2 * j / d))))


def test_embeddings_are_scaled_by_sqrt_d():
    """The encoder input is embedding * sqrt(D) + position (dropout off)."""
    enc = Encoder(toy_model_config(num_encoder_layers=1)).eval()
    src = torch.tensor([[5, 6, 7]])
    seen = {}
    enc.layers[0].register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    enc(src, torch.ones(1, 1, 1, 3, dtype=torch.bool))
    expected = enc.embedding(src) * 4.0 + enc.pos_encoding.table[:3]
    assert torch.allclose(seen["x"], expected)


def test_attention_parameters_keep_their_names_and_shapes():
    """W_q, W_k, W_v, W_o stay four (D, D) linears, whatever product computes them."""
    mha = MultiHeadAttention(16, 4, 0.0)
    shapes = {k: tuple(v.shape) for k, v in mha.state_dict().items()}
    expected = {
        f"W_{x}.{p}": (16, 16) if p == "weight" else (16,)
        for x in "qkvo"
        for p in ("weight", "bias")
    }
    assert shapes == expected


@pytest.mark.parametrize("same_kv", [True, False])
def test_packed_projections_equal_separate_ones(same_kv):
    """One stacked product for q, k, v (self-attention) or k, v gives W_q(x), W_k(x), W_v(x)."""
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 4, 0.0)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keys, values = (x, x) if same_kv else (memory, memory.clone())
    q, k, v = mha.project(x, keys, values)
    for got, linear, inp in ((q, mha.W_q, x), (k, mha.W_k, keys), (v, mha.W_v, values)):
        assert torch.allclose(got, mha.split_heads(linear(inp)), atol=1e-6)


def unfused_loss(hidden, dense, target, smoothing):
    """The output layer's loss as usually written: float logits, then F.cross_entropy."""
    return nn.functional.cross_entropy(dense(hidden).float(), target, label_smoothing=smoothing)


def loss_and_grads(loss_fn, hidden, dense, target, smoothing):
    """(loss, d hidden, d weight, d bias) of one loss function on fresh leaves."""
    hidden = hidden.clone().requires_grad_()
    dense.zero_grad(set_to_none=True)
    loss = loss_fn(hidden, dense, target, smoothing)
    (2.0 * loss).backward()  # an upstream gradient other than 1 (DDP's weighting)
    return loss.detach(), hidden.grad, dense.weight.grad, dense.bias.grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows", [1, CHUNK_ROWS, 2 * CHUNK_ROWS + 5])
def test_projected_cross_entropy_equals_pytorch(smoothing, rows):
    """The fused output layer's loss and gradients equal F.cross_entropy's (float32)."""
    torch.manual_seed(5)
    dense = nn.Linear(8, 37)
    hidden, target = torch.randn(rows, 8), torch.randint(0, 37, (rows,))
    ours = loss_and_grads(projected_cross_entropy, hidden, dense, target, smoothing)
    ref = loss_and_grads(unfused_loss, hidden, dense, target, smoothing)
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_projected_cross_entropy_under_bf16_autocast():
    """Under bf16 autocast: bf16 products, float32 softmax; the unfused path's, to bf16 rounding."""
    torch.manual_seed(6)
    dense = nn.Linear(32, 301)
    hidden, target = torch.randn(150, 32), torch.randint(0, 301, (150,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = loss_and_grads(projected_cross_entropy, hidden, dense, target, 0.1)
        ref = loss_and_grads(unfused_loss, hidden, dense, target, 0.1)
    assert [g.dtype for g in ours] == [torch.float32] * 4
    assert torch.allclose(ours[0], ref[0], rtol=1e-3)  # bf16 keeps 8 bits of mantissa
    for a, b in zip(ours[1:], ref[1:]):
        assert torch.allclose(a, b, rtol=0.02, atol=0.01 * float(b.abs().max()))


def test_training_gradients_equal_the_unfused_loss(model_and_batch):
    """Every parameter's gradient of model.loss equals that of full-logits cross-entropy."""
    model, src, tgt = model_and_batch
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    grads = []
    for fused in (True, False):
        model.zero_grad(set_to_none=True)
        if fused:
            loss = model.loss(src, tgt_in, tgt_out, 0.1)
        else:
            logits, _ = model(src, tgt_in)  # (B, T, V)
            loss = nn.functional.cross_entropy(
                logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1
            )
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], rtol=1e-4, atol=1e-6), k


def load_d2l_transcription():
    """bench/d2l_twin.py, the benchmarks' plain transcription of d2l's chapter 11.7 code."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "d2l_twin.py"
    spec = importlib.util.spec_from_file_location("d2l_twin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_d2l_transcription_computes_our_loss():
    """The benchmarks' d2l transcription, given our weights (attention biases 0), has our loss.

    Both in training mode (dropout is 0 here): d2l masks future positions only in training.
    """
    model, src, tgt = helpers.model_and_batch(norm_first=False)  # d2l's AddNorm is post-LN
    model.train()
    d2l = load_d2l_transcription().D2LTransformer(model.cfg)
    names = {"blks.block": "layers.", "attention1": "self_attention"}
    names["attention2"] = "cross_attention"
    ours = model.state_dict()
    with torch.no_grad():
        for name, p in d2l.named_parameters():
            for theirs, our in names.items():
                name = name.replace(theirs, our)
            p.copy_(ours[name])
        for name, p in model.named_parameters():
            if name.split(".")[-2].startswith("W_") and name.endswith("bias"):
                p.zero_()  # d2l's attention projections have no bias
    args = (src, tgt[:, :-1], tgt[:, 1:], 0.1)
    assert torch.allclose(d2l.loss(*args), model.loss(*args), atol=1e-6)


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_validation_loss_equals_the_full_logits_cross_entropy(model_and_batch, amp):
    """evaluate_loss (through the fused output layer) equals F.cross_entropy on all logits."""
    from core.corpus.vocab import Vocab
    from core.model.scores import evaluate_loss

    model, src, tgt = model_and_batch
    pairs = [(s[s != Vocab.pad_id].numpy(), t[t != Vocab.pad_id].numpy()) for s, t in zip(src, tgt)]
    ours = evaluate_loss(model, pairs, batch_size=2, amp_dtype=amp)  # batches of 2 and 1
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=bool(amp)):
        model.eval()
        for s, t in zip(src, tgt):
            keep_s, keep_t = s[s != Vocab.pad_id][None], t[t != Vocab.pad_id][None]
            logits, _ = model(keep_s, keep_t[:, :-1])  # (1, T, V)
            total += float(
                nn.functional.cross_entropy(logits[0].float(), keep_t[0, 1:], reduction="sum")
            )
            count += keep_t.size(1) - 1
    assert ours == pytest.approx(total / count, rel=1e-5 if amp is None else 1e-2)


def test_an_embedding_starts_as_torchs_own_from_the_same_seed():
    """``embedding`` draws nn.Embedding's N(0, 1) start, the same numbers in the same order
    (seeded runs and the shipped model's recipe train as before); on the meta device it
    draws nothing."""
    torch.manual_seed(3)
    ours, after_ours = embedding(11, 6).weight.detach().clone(), torch.rand(2)
    torch.manual_seed(3)
    torch_own, after_torch = nn.Embedding(11, 6).weight.detach().clone(), torch.rand(2)
    assert torch.equal(ours, torch_own) and torch.equal(after_ours, after_torch)
    with torch.device("meta"):
        assert embedding(11, 6).weight.device.type == "meta"


@pytest.mark.slow  # a fresh interpreter
def test_a_size_count_on_the_meta_device_never_imports_torch_dynamo():
    """The budget counts a model's parameters on the meta device at each launch check and on a
    fresh server's first page: torch._dynamo's import (1.5 s) came with the embeddings' and
    the position table's values there, which a count does not need."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from core.runs import budget\n"
        "from core.model.config import ModelConfig\n"
        "from core.model.transformer import Transformer\n"
        "sizes = dict(src_vocab_size=500, tgt_vocab_size=600, d_model=32, num_heads=4, d_ff=64)\n"
        "real = sum(p.numel() for p in Transformer(ModelConfig(**sizes)).parameters())\n"
        "print(budget.parameters(sizes) == real, 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=helpers.ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "False"]
