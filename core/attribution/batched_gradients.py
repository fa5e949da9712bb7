"""Gradient × input and integrated gradients of many sentences in the same passes (issue 67,
item 2: the file mode's batches).

The sentences are padded together (sources and decoder inputs to the longest of the pass, with
the model's pad id: its masks and positions leave every row as it reads alone), each sentence's
integration points are rows of one batch, and each forward pass serves a group of output steps
of every sentence still that long (``core.attribution.gradients``' passes, for several
sentences in the same tensors). The figures are those of ``methods.attribute`` for each
sentence alone (a test holds them within 1e-5 on every family): the same embeddings path
(``TranslationModel.log_probs_at``), rule and baseline; f at the baseline read on that path,
f at the sentence's own embeddings as the sentence's own record reads it.

The file mode gathers as many sentences as one pass could hold within the server's bytes
(``fits``: ``budget.gradient_rows``); ``attributions`` takes them in order of length, at most
``IG_BATCH`` rows, ``TOTAL_BYTES`` of summed gradients and ``ATTENTION_BYTES`` of one layer's
attention weights a pass (``passes``: sentences of similar lengths, little padding; passes
whose N² weights stay in a CPU's cache, one sentence a pass on a decoder-only model's
prompt), and gives them back in their order.

Batched: ``grad-input`` and ``integrated-gradients`` from the zero, UNK, PAD or MASK baseline,
explaining log p(y_t), p(y_t) or the entropy (``batchable``); random baselines (their draws are
made per sentence) and contrasts go one sentence at a time.

Shape key: P sentences, K integration points, B = P K rows, S / T the longest source / output
of the batch, D model width, V vocabulary, g output steps of a group.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch

from core.attribution.gradients import (
    DEFAULT_CHOICES,
    IG_BATCH,
    PLAIN_FUNCTIONS,
    RANDOM_BASELINES,
    GradientChoices,
    _groups,
    _scores,
    baseline_ids,
    path,
)
from core.attribution.methods import Attribution, shown_gradients
from core.attribution.products import NarrowProducts
from core.measure.progress import check_time
from core.model.interface import TranslationModel, prompt_positions
from core.runs import budget

BATCHED_METHODS = ("grad-input", "integrated-gradients")
TOTAL_BYTES = 64 * 2**20  # the summed gradients of one pass's sentences (float32)
ATTENTION_BYTES = 2 * 2**20  # one layer's attention weights of one pass (float32): a CPU's cache


def batchable(method: str, choices: GradientChoices) -> bool:
    """Whether sentences explained by ``method`` as ``choices`` say can share passes."""
    return (
        method in BATCHED_METHODS
        and choices.baseline not in RANDOM_BASELINES
        and choices.function in PLAIN_FUNCTIONS
    )


def points(method: str, choices: GradientChoices) -> tuple[list[float], list[float]]:
    """(α_k, w_k): integrated gradients' rule, or gradient × input's one point at α = 1."""
    return ([1.0], [1.0]) if method == "grad-input" else path(choices.rule, choices.steps)


def fits(m: TranslationModel, sizes: Sequence[tuple[int, int]], method: str, choices, most=None):
    """Whether one pass holds every integration point of sentences of these (source,
    output) lengths within ``most`` bytes (None: ``budget.GRADIENT_BYTES``)."""
    K = len(points(method, choices)[0])
    S, T = max(s for s, _ in sizes), max(t for _, t in sizes)
    rows = budget.gradient_rows(vars(m.cfg), S, T, prompt_positions(m), most)
    return len(sizes) * K <= rows


def padded(rows: Sequence[Sequence[int]], pad: int, device) -> torch.Tensor:
    """(P, longest) ids, each row right-padded with ``pad``."""
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
    return out


class Batch:
    """P sentences padded together: their ids, embeddings and baselines, and f of any rows."""

    def __init__(self, m: TranslationModel, pairs, method: str, choices: GradientChoices):
        self.m, self.method, self.choices = m, method, choices
        pad = m.pad_id
        self.S = [len(s) for s, _ in pairs]  # each source's length
        self.T = [len(o) for _, o in pairs]  # each output's length
        self.src = padded([s for s, _ in pairs], pad, m.device)  # (P, S)
        self.tgt_in = padded([m.decoder_inputs(o) for _, o in pairs], pad, m.device)  # (P, T)
        self.out = padded([o for _, o in pairs], pad, m.device)  # (P, T)
        self.emb = m.embeddings(self.src, self.tgt_in)  # (P, S, D), (P, T, D)
        self.base = self.baselines()  # (P, S, D), (P, T, D)

    def baselines(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sentence's baseline embeddings (zero, or a token's: ``gradients.baseline_ids``)."""
        c, m = self.choices, self.m
        if self.method == "grad-input" or c.baseline == "zero":
            return tuple(torch.zeros_like(x) for x in self.emb)
        token = {"unk": m.unk_id, "pad": m.pad_id, "mask": m.mask_id}[c.baseline]
        if token is None:
            raise ValueError(f"This model's tokenizer has no {c.baseline.upper()} token.")
        ids = [baseline_ids(m, x, int(token), c.keep_specials) for x in (self.src, self.tgt_in)]
        for x, lengths in zip(ids, (self.S, self.T)):  # the padding stays padding
            for i, n in enumerate(lengths):
                x[i, n:] = m.pad_id
        return m.embeddings(*ids)

    def f(self, rows: torch.Tensor, x_src, x_tgt, steps: torch.Tensor) -> list[torch.Tensor]:
        """g x (B,): f at each of ``steps`` of B rows of sentences ``rows`` (B,), at embeddings
        (B, S', D), (B, T', D) (the longest source of those rows; the prefix cut after the last
        step), each step its own graph above the stacks (``log_probs_at``)."""
        src = self.src[rows, : x_src.size(1)]  # (B, S')
        tgt_in = self.tgt_in[rows, : x_tgt.size(1)]  # (B, T')
        logps = self.m.log_probs_at(src, tgt_in, x_src, x_tgt, steps)  # g x (B, V)
        if self.choices.function == "entropy":
            return [-(logp.exp() * logp).nan_to_num().sum(-1) for logp in logps]  # (B,)
        out = self.out[rows]  # (B, T)
        values = [logp.gather(-1, out[:, t, None])[:, 0] for logp, t in zip(logps, steps)]
        return [v.exp() for v in values] if self.choices.function == "prob" else values

    @torch.no_grad()
    def f_at(self, alpha: float) -> torch.Tensor:
        """(P, T) f of every step of every sentence at b + α (e - b) (log p(y_t) at e: read
        from the ids, as a sentence's own record gives it)."""
        if alpha == 1.0 and self.choices.function == "log-prob":
            logp = self.m.run(self.src, self.tgt_in).float().log_softmax(-1)  # (P, T, V)
            return logp.gather(-1, self.out[..., None])[..., 0]  # (P, T)
        x = [b + alpha * (e - b) for e, b in zip(self.emb, self.base)]  # (P, ., D) each
        rows = torch.arange(len(self.S), device=self.src.device)  # (P,)
        return torch.stack(self.f(rows, *x, torch.arange(max(self.T), device=self.src.device)), 1)


def _integrate(batch: Batch, alphas: list[float], weights: list[float]):
    """Σ_k w_k ∇f_t(b + α_k (e - b)) of every step t of every sentence: (P, T, S, D),
    (P, T, T, D) (zeros past each sentence's own lengths)."""
    e_src, e_tgt = batch.emb
    b_src, b_tgt = batch.base
    P, T = len(batch.S), max(batch.T)
    dev, dtype = e_src.device, e_src.dtype
    a = torch.tensor(alphas, dtype=dtype, device=dev)[None, :, None, None]  # (1, K, 1, 1)
    w = torch.tensor(weights, dtype=dtype, device=dev)[:, None, None]  # (K, 1, 1)
    K = len(alphas)
    total = [e_src.new_zeros(P, T, *e_src.shape[1:]), e_tgt.new_zeros(P, T, *e_tgt.shape[1:])]
    lengths = torch.tensor(batch.T, device=dev)  # (P,)
    for group in _groups(T):
        check_time()  # a shared server's limit for one heavy job, where one is set
        live = (lengths > group[0]).nonzero()[:, 0]  # (A,) sentences this long
        S = max(batch.S[i] for i in live.tolist())
        cut = min(group[-1] + 1, int(lengths[live].max()))
        steps = torch.arange(group[0], cut, device=dev)  # (g,)
        x_src = b_src[live, None, :S] + a * (e_src - b_src)[live, None, :S]  # (A, K, S, D)
        x_tgt = b_tgt[live, None, :cut] + a * (e_tgt - b_tgt)[live, None, :cut]  # (A, K, c, D)
        x_src = x_src.flatten(0, 1).requires_grad_()  # (A K, S, D)
        x_tgt = x_tgt.flatten(0, 1).requires_grad_()  # (A K, cut, D)
        rows = live.repeat_interleave(K)  # (A K,) each row's sentence
        with torch.enable_grad(), NarrowProducts():
            f = batch.f(rows, x_src, x_tgt, steps)  # g x (A K,)
            for j, t in enumerate(steps.tolist()):
                on = lengths[rows] > t  # (A K,) rows whose sentence has step t
                d_src, d_tgt = torch.autograd.grad(
                    f[j][on].sum(), (x_src, x_tgt), retain_graph=j < len(steps) - 1
                )
                at = live[lengths[live] > t]  # (A',) those sentences
                d_src = d_src.view(-1, K, *d_src.shape[1:])[lengths[live] > t]  # (A', K, S, D)
                d_tgt = d_tgt.view(-1, K, *d_tgt.shape[1:])[lengths[live] > t]
                total[0][at, t, :S] += (d_src * w).sum(1)  # (A', S, D)
                total[1][at, t, :cut] += (d_tgt * w).sum(1)  # (A', cut, D)
    return total


def gradients_of(
    m: TranslationModel, pairs: Sequence[tuple[list, list]], method: str, choices
) -> list[tuple[torch.Tensor, float | None]]:
    """Each sentence's (signed scores (T, S + T) of the chosen aggregation, integrated
    gradients' completeness error or None), as ``gradients.grad_input`` /
    ``integrated_gradients`` give them for the sentence alone."""
    batch = Batch(m, pairs, method, choices)
    alphas, weights = points(method, choices)
    grads = _integrate(batch, alphas, weights)
    out = []
    if method == "grad-input":
        for i, (S, T) in enumerate(zip(batch.S, batch.T)):
            parts = [g[i, :T, :n] * e[i, :n] for g, e, n in zip(grads, batch.emb, (S, T))]
            out.append((_scores(parts, choices.aggregation), None))
        return out
    f_e, f_b = batch.f_at(1.0), batch.f_at(0.0)  # (P, T) each
    for i, (S, T) in enumerate(zip(batch.S, batch.T)):
        parts = [
            g[i, :T, :n] * (e[i, :n] - b[i, :n])
            for g, e, b, n in zip(grads, batch.emb, batch.base, (S, T))
        ]  # (T, S, D), (T, T, D)
        change = f_e[i, :T] - f_b[i, :T]  # (T,)
        delta = _scores(parts).sum(-1) - change  # (T,)
        error = float(delta.abs().sum() / change.abs().sum().clamp(min=1e-12))
        out.append((_scores(parts, choices.aggregation), error))
    return out


def attention_bytes(m: TranslationModel, rows: int, S: int, T: int) -> int:
    """One layer's attention weights of ``rows`` rows of sentences padded to S / T (float32):
    H N² a row, N the positions of a prompted model's one stack (P + S + T), else the longer
    of source and output."""
    P = prompt_positions(m)
    N = P + S + T if P is not None else max(S, T)
    return 4 * rows * m.cfg.num_heads * N * N


def passes(m: TranslationModel, pairs, K: int) -> list[list[int]]:
    """The pairs' indices in order of length (similar lengths together: little padding),
    cut into passes of at most IG_BATCH rows (K per sentence) whose summed gradients
    (P T (S + T) D floats, ``_integrate``'s) stay within TOTAL_BYTES and one layer's attention
    weights within ATTENTION_BYTES (the backward pass's softmax and products over N² floats a
    row run at the memory's speed once they leave the cache: tiny GPT-2's 50 pairs of 18 to 64
    positions took 1.37× the time in passes of 5 sentences as in these 45 passes)."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
    out, S, T = [], 0, 0
    for i in order:
        S2, T2 = max(S, len(pairs[i][0])), max(T, len(pairs[i][1]))
        n = len(out[-1]) + 1 if out else 0
        held = 4 * n * T2 * (S2 + T2) * m.cfg.d_model  # float32
        weights = attention_bytes(m, n * K, S2, T2)
        if not out or n * K > IG_BATCH or held > TOTAL_BYTES or weights > ATTENTION_BYTES:
            out.append([i])
            S, T = len(pairs[i][0]), len(pairs[i][1])
            continue
        out[-1].append(i)
        S, T = S2, T2
    return out


def attributions(m: TranslationModel, pairs, method: str, choices) -> list[Attribution]:
    """The Attribution of each (source ids, output ids) pair, as ``methods.attribute`` gives
    it for the pair alone (its ``seconds``: the batch's share); the caller has checked the
    method, the choices and that no pair is empty (``attribute``'s AttributionErrors)."""
    start = time.perf_counter()
    scored: list = [None] * len(pairs)
    with m.evaluating():
        for chunk in passes(m, pairs, len(points(method, choices)[0])):
            for i, result in zip(
                chunk, gradients_of(m, [pairs[i] for i in chunk], method, choices)
            ):
                scored[i] = result
    seconds = (time.perf_counter() - start) / max(1, len(pairs))
    extra = {"choices": choices} if choices != DEFAULT_CHOICES else {}
    out = []
    for (src, tgt), (scores, completeness) in zip(pairs, scored):
        tgt_mask = m.masks(*m.forced_batch(src, tgt)[:2])[1][0, 0]  # (T, T)
        shown, signed = shown_gradients(scores, tgt_mask, choices)
        a = Attribution(method, shown.float().cpu().numpy(), len(src), signed.cpu().numpy())
        out.append(replace(a, completeness=completeness, seconds=seconds, extra=dict(extra)))
    return out
