"""Greedy decoding of a prompted decoder-only model (``lm``: a ``core.model.prompted``
``PromptedModel``, which calls these): many prompts
left-padded at once with a key/value cache, one sentence with every attention row kept as
it decodes (the maps of its translation, no second pass), and the ``Translation`` of an
output, decoded or forced.

Shape key: B prompts, P prompt ids, T output steps, L layers, H heads, N prompt + output.
"""

from __future__ import annotations

import torch
from torch import nn

from core.model import hugging_face as hf
from core.model.parts import AttentionMaps, Source, Translation, TranslationError, translation_of
from core.model.prompt import blocks


@torch.no_grad()
def continue_prompts(lm, prompts: list[list[int]], max_len: int) -> list[list[int]]:
    """Greedy continuations of many prompts at once, left-padded (a key/value cache; each
    row read up to its first id that ends the line)."""
    B, P = len(prompts), max(map(len, prompts))
    ids = torch.full((B, P), lm.pad_id, device=lm.device)  # (B, P)
    mask = torch.zeros(B, P, dtype=torch.long, device=lm.device)
    for b, row in enumerate(prompts):
        ids[b, P - len(row) :], mask[b, P - len(row) :] = torch.tensor(row), 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
    cache, out, done = None, [], torch.zeros(B, dtype=torch.bool, device=lm.device)
    ends = torch.tensor(sorted(lm.ends), device=lm.device)
    with lm.evaluating():
        for _ in range(max(min(max_len, lm.cfg.max_positions - P), 0)):
            o = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         cache=cache, use_cache=True, logits_to_keep=1)  # fmt: skip
            cache, nxt = o.cache, o.logits[:, -1].argmax(-1)  # (B,)
            out.append(nxt)
            done |= torch.isin(nxt, ends)
            if bool(done.all()):
                break
            ids, positions = nxt[:, None], positions[:, -1:] + 1  # (B, 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    rows = torch.stack(out, dim=1).tolist() if out else [[] for _ in prompts]  # (B, T)
    return [through_end(lm, row) for row in rows]


def through_end(lm, ids: list[int]) -> list[int]:
    """Ids up to and including the first that ends the line."""
    return next((ids[: i + 1] for i, x in enumerate(ids) if x in lm.ends), ids)


@torch.no_grad()
def decode_with_maps(lm, src: list[int], max_len: int):
    """Greedy ids after the prompt of ``src`` (through the first that ends the line) with
    what decoding computed on the way: (ids, (logits (T, V), {kind: (L, H, ., .)})), the
    blocks kept from each step's row (no second pass; equal to one: tested). Only the
    source's rows and the decoder inputs' are kept, never the whole N × N."""
    prompt = lm.layout.prompt(src)
    P, room = len(prompt), max(min(max_len, lm.cfg.max_positions - len(prompt)), 1)
    x, cache, out, logits, rows = torch.tensor([prompt], device=lm.device), None, [], [], []
    with lm.evaluating():
        for step in range(room):
            o = lm.model(input_ids=x, cache=cache, use_cache=True, output_attentions=True,
                         logits_to_keep=1)  # fmt: skip
            if step == 0:
                first = torch.stack(o.attentions)[:, 0]  # (L, H, P, P): the prompt's rows
            new = [a[0, :, -1] for a in o.attentions]  # L x (H, keys kept): the last row,
            full = new[0].new_zeros(len(new), new[0].size(0), P + step)  # each layer's own
            for layer, row in enumerate(new):  # keys (a sliding window's: the last) last
                full[layer, :, P + step - row.size(-1) :] = row
            rows.append(full)
            cache, nxt = o.cache, int(o.logits[0, -1].argmax())
            out.append(nxt)
            logits.append(o.logits[0, -1])
            if nxt in lm.ends:
                break
            x = torch.tensor([[nxt]], device=lm.device)
    source, steps = lm.layout.spans(len(src), len(out))
    N = steps.stop
    decoder = torch.stack([nn.functional.pad(r, [0, N - r.size(-1)]) for r in rows], dim=2)
    kinds = {  # (L, H, T, N): the decoder inputs' rows
        "encoder": first[..., source, source],
        "decoder_self": decoder[..., steps],
        "cross": decoder[..., source],
    }
    return out, (torch.stack(logits), kinds)


@torch.no_grad()
def translation(lm, src, out_ids, topk, notes, forced=False, passed=None) -> Translation:
    """The Translation of ``out_ids`` after ``src``: its three blocks, of what decoding
    computed (``passed``: logits (T, V) and {kind: block}) or of one pass."""
    if not out_ids:
        raise TranslationError("The model wrote nothing: try another prompt template.")
    tgt_in = lm.decoder_inputs(out_ids)
    if passed is None:
        p = lm._pass(torch.tensor([src], device=lm.device),
                     torch.tensor([tgt_in], device=lm.device), weights=True)  # fmt: skip
        passed = (
            p.logits[0],
            blocks(p.attentions[:, 0], *lm.layout.spans(len(src), len(tgt_in))),
        )
    kinds = passed[1]  # (L, H, ., .) each
    return translation_of(
        source=Source(
            ids=list(src), tokens=lm.source_tokens(src), unknown=[False] * len(src), notes=[]
        ),  # fmt: skip
        out_ids=out_ids,
        logp=passed[0].float().log_softmax(-1),  # (T, V)
        maps=AttentionMaps(kinds["encoder"], kinds["decoder_self"], kinds["cross"]),
        outputs=lm.target_tokens(out_ids),
        ended=out_ids[-1] in lm.ends,
        decoder_inputs=lm.target_tokens(tgt_in),
        words=lm.target_words(out_ids),
        candidates=hf.candidates(lm),
        topk=topk,
        notes=notes,
        forced=forced,
    )
