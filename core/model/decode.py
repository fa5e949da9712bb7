"""Greedy decoding with a key/value cache, beam search, and batched translation.

A decoder-only trainee (``core.model.trainee.DecoderTrainee``) is decoded by its own
``greedy_decode`` (``source <eos> <bos>``, then its output) and explained by ``forced`` (its
one causal attention cut into the three maps); it has no beam search: it decodes greedily.

Shape key: B batch, S source length, T output steps, L layers, H heads, V vocabulary,
K beam size.
"""

from __future__ import annotations

import torch

from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model.parts import (
    ALPHA,
    MAX_LEN,
    TOP_K,
    AttentionMaps,
    Source,
    Translation,
    TranslationError,
    evaluating,
    translation_of,
)
from core.model.trainee import DecoderTrainee
from core.model.transformer import Transformer

EXAMPLES = ("i am cold .", "j'ai froid .")  # a sentence to suggest, in the model's source language


def prepare_source(sentence: str, src_vocab: Vocab, max_len: int):
    """Tokenize a sentence -> (ids + <eos>, tokens + <eos>, unknown flags, warnings).

    The tokens are what the model reads: words, or a subword vocabulary's pieces.
    """
    words = tokenize(sentence)
    if not words:
        raise TranslationError("The sentence is empty: type a few words to translate.")
    tokens, ids = src_vocab.segment(words)
    warnings = []
    if len(tokens) > max_len - 1:
        warnings.append(
            f"The sentence has {len(tokens)} tokens; only the first {max_len - 1} were used."
        )
        tokens, ids = tokens[: max_len - 1], ids[: max_len - 1]
    unknown = [i == Vocab.unk_id for i in ids]
    if all(unknown):
        example = next((e for e in EXAMPLES if not src_vocab.unknown(e.split())), EXAMPLES[0])
        raise TranslationError(
            "None of these words is in the model's source vocabulary: "
            f"{' '.join(words)}. Try simple everyday words (e.g. '{example}')."
        )
    return ids + [Vocab.eos_id], tokens + ["<eos>"], unknown + [False], warnings


def _assemble(rows: list[torch.Tensor], square: bool) -> torch.Tensor:
    """Per-step rows (L, B, H, 1, k_t) -> one (L, B, H, T, K) map, zero-padded on keys."""
    width = len(rows) if square else rows[0].size(-1)
    L, B, H = rows[0].shape[:3]
    out = rows[0].new_zeros(L, B, H, len(rows), width)  # (L, B, H, T, K)
    for t, r in enumerate(rows):
        out[..., t, : r.size(-1)] = r[..., 0, :]
    return out


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    max_len: int,
    need_weights=False,
    scores=True,
    memory=None,
):
    """Cached greedy decoding of (B, S) ids -> (ids (B, T) without <bos>, logp (B, T, V), maps).

    Each step feeds only the newest token; keys/values of earlier steps come from the cache.
    Rows after a sequence's <eos> are to be ignored by the caller. With ``scores=False``
    logp is None: the (B, T, V) log-probabilities are not kept (256 sentences that run to
    50 tokens over 6,000 words would hold 0.3 GB, and twice that while stacked).
    ``memory``: the (B, S, D) encoder output, given instead of encoding ``src``.
    """
    if memory is None:
        memory, src_mask, enc_maps = model.encode(src, need_weights)
    else:
        src_mask, enc_maps = model.src_mask(src), None
    cache = [{} for _ in model.decoder.layers]
    ys = torch.full((src.size(0), 1), Vocab.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    logps, self_rows, cross_rows = [], [], []
    for _ in range(max_len):
        logits, w_self, w_cross = model.decoder(
            ys[:, -1:], memory, src_mask, None, need_weights, cache
        )  # logits (B, 1, V)
        logp = logits[:, -1].float().log_softmax(-1)  # (B, V)
        nxt = logp.argmax(-1)  # (B,)
        if scores:
            logps.append(logp)
        self_rows.append(w_self)
        cross_rows.append(w_cross)
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, t + 2)
        done |= nxt == Vocab.eos_id
        if done.all():
            break
    maps = None
    if need_weights:
        maps = AttentionMaps(enc_maps, _assemble(self_rows, True), _assemble(cross_rows, False))
    return ys[:, 1:], torch.stack(logps, dim=1) if scores else None, maps


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha."""
    return ((5 + length) / 6) ** alpha


def _reorder(cache: list[dict], index: torch.Tensor) -> None:
    """Keep the cache rows of the surviving beams (in place)."""
    for layer in cache:
        for key in ("k", "v"):
            layer[key] = layer[key].index_select(0, index)


@torch.no_grad()
def beam_search(
    model: Transformer, src: torch.Tensor, max_len: int, beam_size: int = 4, alpha: float = ALPHA
) -> list[int]:
    """Beam search for one sentence src (1, S) -> best ids (with <eos> if reached)."""
    memory, src_mask, _ = model.encode(src)
    memory = memory.expand(beam_size, -1, -1)  # (K, S, D)
    src_mask = src_mask.expand(beam_size, -1, -1, -1)  # (K, 1, 1, S)
    cache = [{} for _ in model.decoder.layers]
    seqs = torch.full((beam_size, 1), Vocab.bos_id, dtype=torch.long, device=src.device)
    scores = torch.full((beam_size,), float("-inf"), device=src.device)
    scores[0] = 0.0  # all beams start identical: keep one alive
    finished: list[tuple[float, list[int]]] = []
    for step in range(1, max_len + 1):
        logits, _, _ = model.decoder(seqs[:, -1:], memory, src_mask, None, False, cache)
        total = scores[:, None] + logits[:, -1].float().log_softmax(-1)  # (K, V)
        top, flat = total.view(-1).topk(2 * beam_size)  # candidates (2K,)
        beam_idx, tok = flat // total.size(1), flat % total.size(1)
        keep = []
        for rank, (s, b, t) in enumerate(zip(top.tolist(), beam_idx.tolist(), tok.tolist())):
            if t == Vocab.eos_id:  # a hypothesis ends only if it ranks among the best K
                if rank < beam_size and s > float("-inf"):
                    finished.append((s / length_penalty(step, alpha), seqs[b, 1:].tolist() + [t]))
            elif len(keep) < beam_size and s > float("-inf"):
                keep.append((s, b, t))
        best_done = max((f[0] for f in finished), default=float("-inf"))
        bound = keep[0][0] / length_penalty(max_len, alpha) if keep else float("-inf")
        if len(finished) >= beam_size or best_done >= bound:
            break
        index = torch.tensor([b for _, b, _ in keep], device=src.device)
        _reorder(cache, index)
        new_tok = torch.tensor([[t] for _, _, t in keep], device=src.device)
        seqs = torch.cat([seqs.index_select(0, index), new_tok], dim=1)  # (K', t + 1)
        scores = torch.tensor([s for s, _, _ in keep], device=src.device)
        memory, src_mask = memory[: len(keep)], src_mask[: len(keep)]
    if not finished:
        return seqs[scores.argmax(), 1:].tolist()
    return max(finished, key=lambda f: f[0])[1]


@torch.no_grad()
def teacher_forced(model: Transformer | DecoderTrainee, src: torch.Tensor, out_ids: list[int]):
    """One explicit pass over <bos> + out_ids -> (logp (1, T, V), AttentionMaps)."""
    tgt = torch.tensor([[Vocab.bos_id] + out_ids], device=src.device)  # (1, T + 1)
    if isinstance(model, DecoderTrainee):  # one causal pass, read as the three maps
        logits, maps = model.forced(src, tgt[:, :-1])  # (1, T, V), every map
    else:
        logits, maps = model(src, tgt[:, :-1], need_weights=True)  # (1, T, V), every map
    return logits.float().log_softmax(-1), maps


def _cut_at_eos(ids: list[int]) -> list[int]:
    """Ids up to and including the first <eos>."""
    return ids[: ids.index(Vocab.eos_id) + 1] if Vocab.eos_id in ids else ids


@torch.no_grad()
def translate(
    model: Transformer | DecoderTrainee,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    sentence: str,
    beam_size: int = 1,
    alpha: float = ALPHA,
    max_len: int = MAX_LEN,
    topk: int = TOP_K,
) -> Translation:
    """Translate one sentence with greedy (beam_size 1) or beam search, with all maps (a
    decoder-only trainee: greedy, its maps the blocks of one pass over prompt and output)."""
    with evaluating(model):
        device = next(model.parameters()).device
        ids, src_tokens, unknown, warnings = prepare_source(
            sentence, src_vocab, model.cfg.max_positions
        )
        max_len = max(1, min(max_len, model.cfg.max_positions - 1))
        src = torch.tensor([ids], device=device)  # (1, S)
        if isinstance(model, DecoderTrainee):  # greedy; its maps from one pass after
            out_ids = _cut_at_eos(model.greedy_decode(src, max_len)[0].tolist())
            logp, maps = teacher_forced(model, src, out_ids)
        elif beam_size <= 1:
            out, logp, maps = greedy_decode(model, src, max_len, need_weights=True)
            out_ids = _cut_at_eos(out[0].tolist())
            n = len(out_ids)
            maps = AttentionMaps(
                maps.encoder, maps.decoder_self[..., :n, :n], maps.cross[..., :n, :]
            )
            logp = logp[:, :n]
        else:
            out_ids = beam_search(model, src, max_len, beam_size, alpha)
            logp, maps = teacher_forced(model, src, out_ids)
    if not out_ids or out_ids[-1] != Vocab.eos_id:
        warnings.append(f"Stopped at the maximum output length ({max_len}) before <eos>.")
    return _translation(
        Source(ids, src_tokens, unknown, warnings), out_ids, logp, maps, tgt_vocab, topk
    )


def _translation(
    src: Source,
    out_ids: list[int],
    logp,
    maps: AttentionMaps,
    tgt_vocab: Vocab,
    topk: int,
    shown: list[str] | None = None,
) -> Translation:
    """The Translation of ``out_ids`` after ``src``: logp (1, T, V) and maps (L, 1, H, ., .).
    ``shown``: the tokens of a target the user gave, as typed (a word the vocabulary reads
    as <unk> keeps its name), which makes it a forced translation."""
    outputs = tgt_vocab.decode(out_ids) if shown is None else shown
    ended = bool(out_ids) and out_ids[-1] == Vocab.eos_id
    return translation_of(
        source=src,
        out_ids=out_ids,
        logp=logp[0],
        maps=AttentionMaps(
            *(m[:, 0].float().cpu() for m in (maps.encoder, maps.decoder_self, maps.cross))
        ),
        outputs=outputs,
        ended=ended,
        decoder_inputs=["<bos>"] + outputs[:-1] if outputs else ["<bos>"],
        words=tgt_vocab.words(outputs[:-1] if ended else outputs),
        candidates=tgt_vocab.decode,
        topk=topk,
        forced=shown is not None,
    )


@torch.no_grad()
def forced_translation(
    model: Transformer,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    sentence: str,
    target: str,
    topk: int = TOP_K,
) -> Translation:
    """The target a user gave, teacher-forced after the sentence, with every map and each
    target token's probability and rank: a Translation explained like the model's own."""
    words = tokenize(target or "")
    if not words:
        raise TranslationError("The target is empty: type the translation to explain.")
    with evaluating(model):
        device = next(model.parameters()).device
        ids, src_tokens, unknown, warnings = prepare_source(
            sentence, src_vocab, model.cfg.max_positions
        )
        pieces, out_ids = tgt_vocab.segment(words)  # words, or a subword vocabulary's pieces
        limit = model.cfg.max_positions - 1
        if len(out_ids) + 1 > limit:
            warnings.append(
                f"The target has {len(out_ids)} tokens; only the first {limit - 1} were used."
            )
        out_ids = out_ids[: limit - 1] + [Vocab.eos_id]
        shown = pieces[: limit - 1] + ["<eos>"]
        if missing := tgt_vocab.unknown(words):
            warnings.append(
                "Not in the model's target vocabulary (fed as <unk>): "
                + ", ".join(dict.fromkeys(missing))
                + "."
            )
        logp, maps = teacher_forced(model, torch.tensor([ids], device=device), out_ids)
    source = Source(ids, src_tokens, unknown, warnings)
    return _translation(source, out_ids, logp, maps, tgt_vocab, topk, shown)


def _greedy_ids(model: Transformer | DecoderTrainee, src: torch.Tensor, max_len: int):
    """Greedy output ids (B, T) of right-padded sources (B, S): the encoder-decoder's cached
    decoding, or a decoder-only trainee's continuation of ``source <eos> <bos>``."""
    if isinstance(model, DecoderTrainee):
        return model.greedy_decode(src, max_len)
    return greedy_decode(model, src, max_len, scores=False)[0]


@torch.no_grad()
def translate_batch(
    model: Transformer | DecoderTrainee,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    sources: list[list[str]],
    batch_size: int = 256,
    max_len: int = MAX_LEN,
) -> list[list[str]]:
    """Greedy translations (word lists, no specials) of tokenized sentences, in order.

    With a subword vocabulary the pieces are joined back into words.
    """
    with evaluating(model):
        device = next(model.parameters()).device
        limit = model.cfg.max_positions - 1
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        results: list[list[str]] = [[] for _ in sources]
        for start in range(0, len(order), batch_size):
            group = order[start : start + batch_size]
            ids = src_vocab.encode_many([sources[i] for i in group])
            seqs = [s[: limit - 1] + [Vocab.eos_id] for s in ids]
            width = max(len(s) for s in seqs)
            src = torch.tensor([s + [Vocab.pad_id] * (width - len(s)) for s in seqs], device=device)
            out = _greedy_ids(model, src, min(max_len, limit))  # (B, T)
            for i, row in zip(group, out.tolist()):
                tokens = tgt_vocab.decode(_cut_at_eos(row))
                results[i] = tgt_vocab.words([w for w in tokens if w != "<eos>"])
    return results
