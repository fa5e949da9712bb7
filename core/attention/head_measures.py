"""Head importance's three measures on any model (``core.model.interface``): corpus BLEU of
greedy translations and mean teacher-forced loss with heads removed, and the gradient score of
Michel, Levy & Neubig (2019), each row of a batch carrying the gates of its own head set
(``TranslationModel.rows_gated``).

The sample is a validation split's (``core.measure.sample``): its outputs are read back as
d2l's words before BLEU against the split's references. Greedy rows whose head sets leave
the encoder whole read the encoder's output computed once; each head set's loss runs again
from the first layer it removes a head in (``core.model.resumed``). A Hugging Face model's
passes may run in bfloat16 where the CPU runs it natively (``resolved_precision``; the
studio's small models are measured in float32, ``capabilities``).

Shape key: B rows (sentences x head sets), H heads, S source tokens, T target tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch

from core.attention.ablation import HeadSpec, all_heads
from core.measure.progress import check_time
from core.measure.sample import Sample
from core.model.batched import (
    FORCED_ROWS,
    Tick,
    cast_output_weight,
    decode_rows,
    encoded_states,
    forced_batch,
    give_back_memory,
    greedy_pass,
    label_losses,
    token_losses,
)
from core.model.bleu import corpus_bleu
from core.model.interface import TranslationModel
from core.model.resumed import resumable

GRADIENT_ROWS = 64  # the most pairs one backward pass of the gradient score reads
GRADIENT_ROW_CELLS = 4 * 59_514  # a backward pass's pairs x vocabulary: float32 logits, their
# gradient and the saved activations; at opus-mt's size (59,514 words) the gradient of 32 rows
# took 900 MB above the model, of 4 rows 150 (as fast on 2 cores)
PRECISIONS = ("auto", "float32", "bfloat16")  # of the passes that remove heads


def deadline(rows: int) -> None:
    """A ``Tick`` that checks the time limit (TimeLimit past a ``time_limit``)."""
    check_time()


def resolved_precision(precision: str, m: TranslationModel) -> str:
    """``precision`` itself, or for "auto": bfloat16 on a CPU whose oneDNN runs it natively
    (3-4x float32's matrix products there), float32 anywhere else or where the model is
    measured exactly (``supports("bfloat16")``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if m.supports("bfloat16") is not None:
        return "float32"
    if precision != "auto":
        return precision
    native = m.device.type == "cpu" and torch.backends.mkldnn.is_available()
    return "bfloat16" if native and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"


class Measures:
    """BLEU, loss and gradient scores of a model on a sample, heads removed."""

    loss_row = 0.6  # one teacher-forced pair's time, in greedily decoded sentences (opus-mt)

    def __init__(self, m: TranslationModel, sample: Sample, target_lang=None, precision="float32"):
        self.m, self.sample, self.target_lang = m, sample, target_lang
        self.precision = resolved_precision(precision, m)
        self.heads = {(h.kind, h.layer) for h in all_heads(m.cfg, m.head_kinds)}
        self.encoder_apart = "encoder" in m.head_kinds  # a decoder-only model reads no memory

    def gates_memory(self, heads: Sequence[HeadSpec]) -> bool:
        """Whether removing ``heads`` changes what the decoder reads of the source: an encoder
        head, or any head of a decoder-only model (its prompt is read by the same heads)."""
        return not self.encoder_apart or any(h.kind == "encoder" for h in heads)

    def rows_per_pass(self) -> int:
        """(Head set, sentence) rows one greedy pass decodes: fewer for a bigger model."""
        return decode_rows(self.m.cfg)

    def gradient_rows(self) -> int:
        """Pairs one backward pass reads: fewer for a bigger vocabulary."""
        return max(1, min(GRADIENT_ROWS, GRADIENT_ROW_CELLS // self.m.cfg.tgt_vocab_size))

    def all_heads(self) -> list[HeadSpec]:
        """Every head, kinds in KINDS order, then layer, then head."""
        return all_heads(self.m.cfg, self.m.head_kinds)

    def gates(self, sets: Sequence[Sequence[HeadSpec]], rows: Sequence[int]) -> dict:
        """{(kind, layer): (B, H) gates}: row b is 0 at the heads set ``rows[b]`` removes."""
        table: dict[tuple[str, int], torch.Tensor] = {}
        H = self.m.cfg.num_heads
        for b, j in enumerate(rows):
            for h in sets[j]:
                key = (h.kind, h.layer)
                if key not in table:
                    table[key] = torch.ones(len(rows), H, device=self.m.device)
                table[key][b, h.head] = 0.0
        return table

    def computing(self, keep_casts: bool = True):
        """The context of the passes that remove heads: bfloat16 autocast (matrix products
        in bfloat16 accumulated in float32; the loss's log-softmax in float32) or plain
        float32. ``keep_casts``: the weights' bfloat16 copies are made once and kept while
        the context lasts (150 MB at opus-mt's size): the decoding phase opens it once around
        all its passes; the teacher-forced phase casts at each use instead, its peak lower."""
        if self.precision == "bfloat16":
            return torch.autocast(self.m.device.type, torch.bfloat16, cache_enabled=keep_casts)
        return nullcontext()

    @torch.no_grad()
    def output_ids(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None):
        """Greedy outputs of every sample sentence with each set of heads removed:
        [set][sentence] -> output ids (read up to the end token). ``tick(rows)`` after each
        pass."""
        n, sources = len(self.sample.sources), self.sample.src_ids
        inside = [self.gates_memory(heads) for heads in sets]
        with self.computing():  # bfloat16 copies of the weights made once for the phase
            encoded = (
                encoded_states(self.m, sources, FORCED_ROWS, deadline) if not all(inside) else []
            )
            order = sorted(range(n), key=lambda i: len(sources[i]))
            rows = sorted(
                ((j, i) for i in order for j in range(len(sets))), key=lambda r: inside[r[0]]
            )  # sources of like length, the sets that gate the encoder last
            ids: list[list] = [[None] * n for _ in sets]
            per_pass = self.rows_per_pass()
            for start in range(0, len(rows), per_pass):
                chunk = rows[start : start + per_pass]
                whole = not any(inside[j] for j, _ in chunk)  # the encoder as it is: run once
                memory = [encoded[i] for _, i in chunk] if whole else None
                with self.m.rows_gated(self.gates(sets, [j for j, _ in chunk])):
                    out = greedy_pass(
                        self.m, [sources[i] for _, i in chunk], self.target_lang, memory
                    )
                for (j, i), row in zip(chunk, out):
                    ids[j][i] = row
                if tick:
                    tick(len(chunk))
        give_back_memory()
        return ids

    def bleu(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None) -> list[float]:
        """Corpus BLEU of the greedy outputs with each set of heads removed."""
        return [
            corpus_bleu([self.m.scored_words(ids) for ids in rows], self.sample.references)
            for rows in self.output_ids(sets, tick)
        ]

    @torch.no_grad()
    def losses(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None) -> list[float]:
        """Mean per-token teacher-forced loss over the sample's pairs, for each head set: each
        batch of pairs run once, then for each head set run again from the first layer it
        removes a head in, the layers below as they were (``core.model.resumed``: about half
        the work of whole passes; a head of an encoder that a decoder reads: the whole pass)."""
        pairs = self.sample.encoded
        order = sorted(range(len(pairs)), key=lambda p: (len(pairs[p][0]), len(pairs[p][1])))
        sums, count = [0.0] * len(sets), sum(len(t) for _, t in pairs)
        with self.computing():  # the weights' bfloat16 copies made once for the phase
            weight = None
            if torch.is_autocast_enabled(self.m.device.type):
                weight = cast_output_weight(self.m, self.m.device.type)  # (V, D)
            for start in range(0, len(order), FORCED_ROWS):
                chunk = [pairs[p] for p in order[start : start + FORCED_ROWS]]
                src, dec, labels = forced_batch(self.m, chunk)  # (B, S), (B, T), (B, T)
                whole, again = resumable(self.m, src, dec)  # (B, T, D), its re-run
                for j, heads in enumerate(sets):
                    hidden = whole
                    if heads:
                        with self.m.rows_gated(self.gates(sets, [j] * len(chunk))):
                            hidden = again(*self.first(heads))  # (B, T, D)
                    sums[j] += float(label_losses(self.m, hidden, labels, weight).sum())
                    if tick:
                        tick(len(chunk) * self.share(heads))
        give_back_memory()
        return [s / max(count, 1) for s in sums]

    @staticmethod
    def first(heads: Sequence[HeadSpec]) -> tuple[str, int]:
        """(kind, layer) of the first layer a pass reaches that removes one of ``heads``: an
        encoder's before a decoder's, then the lowest."""
        h = min(heads, key=lambda h: (h.kind != "encoder", h.layer))
        return h.kind, h.layer

    def share(self, heads: Sequence[HeadSpec]) -> float:
        """The part of a whole pass that ``losses`` runs again for a head set: the layers
        from its first one, and the output layer as one more (all of it for a head of an
        encoder that a decoder reads, and for none removed)."""
        if not heads:
            return 1.0
        kind, start = self.first(heads)
        if kind == "encoder" and "cross" in self.m.head_kinds:
            return 1.0
        layers = self.m.layers(kind)
        return (layers - start + 1) / (layers + 1)

    def gradients(self) -> dict[HeadSpec, float]:
        """{HeadSpec: I_h}: mean over pairs of |dL(x)/d xi_h| at gates xi = 1, L(x) the
        pair's mean token loss (one backward pass per batch, each pair its own gates)."""
        pairs, H = self.sample.encoded, self.m.cfg.num_heads
        sums = {key: torch.zeros(H) for key in sorted(self.heads)}
        with torch.enable_grad():
            per_pass = self.gradient_rows()
            for start in range(0, len(pairs), per_pass):
                check_time()  # a shared server's limit for one heavy job
                chunk = pairs[start : start + per_pass]
                ones = {
                    key: torch.ones(len(chunk), H, device=self.m.device, requires_grad=True)
                    for key in sums
                }  # (B, H) each
                with self.m.rows_gated(ones):
                    tokens = token_losses(self.m, chunk)  # (B, T)
                counts = torch.tensor([max(len(t), 1) for _, t in chunk], device=self.m.device)
                losses = tokens.sum(1) / counts  # (B,)
                grads = torch.autograd.grad(losses.sum(), list(ones.values()))  # (B, H) each
                for key, g in zip(ones, grads):
                    sums[key] += g.abs().sum(0).cpu()
        count = max(len(pairs), 1)
        give_back_memory()
        return {h: float(sums[(h.kind, h.layer)][h.head]) / count for h in self.all_heads()}
