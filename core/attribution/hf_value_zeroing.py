"""Value zeroing (Mohebbi et al. 2023) of a Hugging Face encoder-decoder, as
``core.attribution.value_zeroing`` measures the studio's own model: for each layer and each
token j, the layer runs again with j's value vectors zeroed in every head of one attention
sub-layer (a forward hook on the value projection; keys and weights unchanged), and

    C_ij = 1 - cos(y_i, y_i^{-j})

with y the layer's output (feed-forward and norms included). All zeroings of one layer run as
one batch of copies through the model's own stack, stopped once that layer has run (the
layers before it see no change); a decoder layer's copies read the encoder's output as it
was. Rows are normalised and composed over layers like the other methods.

Shape key: S source tokens, T output tokens, D model width, N copies in one batch.
"""

from __future__ import annotations

import torch

from core.attribution.compose import DecoderStep, normalised
from core.attribution.value_zeroing import change
from core.model import hugging_face as hf
from core.model.hf_inside import attention_modules, layers_of


class _StopError(Exception):
    """Raised by a hook once the layer of interest has run: the rest of the pass is skipped."""


def _value_projection(module: torch.nn.Module) -> torch.nn.Module:
    return getattr(module, "v_proj", None) or module.v


def _zeroing(keep: torch.Tensor):
    """A forward hook on a value projection: its (N, Tk, H * Dh) output times keep (N, Tk, 1)."""

    def hook(module, args, output):
        return output * keep.to(output.dtype)

    return hook


def _layer_output(stack, index: int, run, hooks: list[tuple[torch.nn.Module, object]]):
    """(N, T, D) layer ``index``'s output when ``run()`` passes through ``stack`` with the
    value hooks on; the pass stops there."""
    seen: dict = {}

    def stop(module, args, output):
        seen["y"] = output[0] if isinstance(output, tuple) else output
        raise _StopError

    handles = [m.register_forward_hook(h) for m, h in hooks]
    handles.append(layers_of(stack)[index].register_forward_hook(stop))
    try:
        run()
    except _StopError:
        pass
    finally:
        for h in handles:
            h.remove()
    return seen["y"]


def _zero_one_each(n: int, rows: int, offset: int, device) -> torch.Tensor:
    """(rows, n, 1) keep masks: copy offset + j zeroes token j, every other copy keeps all."""
    keep = torch.ones(rows, n, device=device)
    keep[offset + torch.arange(n), torch.arange(n)] = 0.0
    return keep[..., None]


@torch.no_grad()
def encoder_matrix(hm: hf.HFModel, src: torch.Tensor, index: int) -> torch.Tensor:
    """One encoder layer's value-zeroing matrix (S, S)."""
    encoder, S = hm.model.get_encoder(), src.size(1)
    v = _value_projection(attention_modules(hm.model, "encoder")[index])

    def through(copies: torch.Tensor):
        return lambda: encoder(input_ids=copies, attention_mask=torch.ones_like(copies))

    base = _layer_output(encoder, index, through(src), [])  # (1, S, D)
    keep = _zero_one_each(S, S, 0, src.device)  # (S, S, 1)
    moved = _layer_output(encoder, index, through(src.expand(S, -1)), [(v, _zeroing(keep))])
    return normalised(change(base, moved))  # (S, S)


@torch.no_grad()
def decoder_step(hm: hf.HFModel, memory, src, dec, index: int) -> DecoderStep:
    """One decoder layer's value-zeroing step: rows over the decoder inputs and the source."""
    decoder, T, S = hm.model.get_decoder(), dec.size(1), src.size(1)
    v_self = _value_projection(attention_modules(hm.model, "decoder_self")[index])
    v_cross = _value_projection(attention_modules(hm.model, "cross")[index])

    def through(n: int):
        return lambda: hm.model(
            encoder_outputs=(memory.expand(n, -1, -1),),
            attention_mask=torch.ones(n, S, dtype=torch.long, device=src.device),
            decoder_input_ids=dec.expand(n, -1),
            use_cache=False,
        )

    base = _layer_output(decoder, index, through(1), [])  # (1, T, D)
    keep_self = _zero_one_each(T, T + S, 0, src.device)  # (T + S, T, 1)
    keep_cross = _zero_one_each(S, T + S, T, src.device)  # (T + S, S, 1)
    hooks = [(v_self, _zeroing(keep_self)), (v_cross, _zeroing(keep_cross))]
    moved_by = change(base, _layer_output(decoder, index, through(T + S), hooks))  # (T, T + S)
    moved_by[:, :T] *= torch.ones(T, T, device=src.device).tril()  # later tokens: noise only
    rows = normalised(moved_by)  # (T, T + S)
    return DecoderStep(rows[:, :T], rows[:, T:])


@torch.no_grad()
def value_zeroing_steps(hm: hf.HFModel, src_ids, out_ids):
    """Every layer's value-zeroing mixing: encoder matrices (S, S) and decoder steps."""
    src, dec = hf.forced_inputs(hm, src_ids, out_ids)  # (1, S), (1, T)
    encoder = hm.model.get_encoder()
    memory = encoder(input_ids=src, attention_mask=torch.ones_like(src)).last_hidden_state
    steps = [encoder_matrix(hm, src, i) for i in range(len(layers_of(encoder)))]
    n_dec = len(layers_of(hm.model.get_decoder()))
    return steps, [decoder_step(hm, memory, src, dec, i) for i in range(n_dec)]
