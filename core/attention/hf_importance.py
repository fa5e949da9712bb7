"""Head importance's three measures for a Hugging Face encoder-decoder: corpus BLEU of greedy
``generate`` and mean teacher-forced loss with heads removed, and the gradient score of
Michel, Levy & Neubig (2019), each row of a batch carrying the gates of its own head set
(``core.model.hf_inside.rows_gated``), as ``core.attention.importance`` measures the
studio's own model.

The sample is the studio's validation split (fra-eng, or a corpus given as ``source``): its
sentences were written word by word by d2l's preprocessing ("i'm home ."), so they are given
to the model's tokenizer as text ("I'm home."), and its outputs are read back with the same
preprocessing before BLEU against the split's references.

Shape key: B rows (sentences x head sets), H heads, S source pieces, T target pieces,
V vocabulary.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass

import torch

from core.attention.ablation import HeadSpec
from core.attention.kinds import KINDS
from core.corpus.splits import Split
from core.corpus.text import tokenize
from core.model import hugging_face as hf
from core.model.decode import MAX_LEN
from core.model.hf_inside import attention_modules, head_geometry, output_logits, rows_gated
from core.model.scores import corpus_bleu

Tick = Callable[[int], None] | None  # called with the rows done after each pass

ROWS_PER_PASS = 96  # (head set, sentence) rows decoded together by greedy generate (bench/
# hf_server_memory.py: 128 rows were 5 % faster, their peak 50-190 MB higher, past 1.5 GB)
FORCED_ROWS = 32  # rows teacher-forced together (their logits made CHUNK positions at a time)
GRADIENT_ROWS = 4  # pairs per backward pass: float32 logits, their gradient and the saved
# activations. At opus-mt's size (bench/hf_server_memory.py), above the model: decoding
# 128 rows took 470 MB, 64 rows 330; the gradient 32 rows 900, 4 rows 150 (as fast on 2
# cores); teacher-forcing 32 rows 270 MB with the logits made in chunks (455 MB whole)
IGNORE = -100  # a label position that does not count (padding)
CHUNK = 64  # label positions whose logits are made at once: (64, V) float32 is 15 MB
PRECISIONS = ("auto", "float32", "bfloat16")  # of the passes that remove heads


def resolved_precision(precision: str, device: torch.device) -> str:
    """``precision`` itself, or for "auto": bfloat16 on a CPU whose oneDNN runs it natively
    (3-4x float32's matrix products there), float32 anywhere else."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision != "auto":
        return precision
    native = device.type == "cpu" and torch.backends.mkldnn.is_available()
    return "bfloat16" if native and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"


def as_text(words: Sequence[str]) -> str:
    """d2l's words back to a sentence: no space before , . ! ? and a capital first letter."""
    text = re.sub(r" ([,.!?])", r"\1", " ".join(words))
    return text[:1].upper() + text[1:]


@dataclass
class HFSample:
    """Validation sentences encoded by a Hugging Face model's own tokenizer."""

    sources: list[list[str]]  # N source sentences in d2l's words
    references: list[list[list[str]]]  # all reference translations of each, in words
    src_ids: list[list[int]]  # N sources as the model's ids (its specials included)
    encoded: list[tuple[list[int], list[int]]]  # every (source, reference) pair as ids


def hf_sample(hm: hf.HFModel, split: Split, n: int, target_lang: str | None = None) -> HFSample:
    """The first ``n`` source sentences of ``split``, encoded by the model's tokenizer."""
    groups = split.groups()[:n]
    limit = hm.cfg.max_positions
    ids = [
        hm.tokenizer(as_text(src), truncation=True, max_length=limit)["input_ids"]
        for src, _ in groups
    ]
    encoded = [
        (src, hf.target_ids(hm, as_text(ref), target_lang))
        for src, (_, refs) in zip(ids, groups)
        for ref in refs
    ]
    return HFSample([g[0] for g in groups], [g[1] for g in groups], ids, encoded)


def give_back_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``), so the
    buffers one phase freed do not stay resident under the next; nothing without glibc."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def label_losses(model, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, T) cross-entropy of each label given the decoder's (B, T, D) outputs, 0 where the
    label is IGNORE, in float32 whatever the outputs' type. The logits are made CHUNK label
    positions at a time (``hf_inside.output_logits``) and padding gets none: a (B, T, V)
    tensor of a 59k vocabulary is what a teacher-forced pass of the whole model kept (two
    of them, once ``final_logits_bias`` turned bfloat16 logits into float32 ones)."""
    flat, wanted = hidden.flatten(0, 1), labels.flatten()  # (B*T, D), (B*T,)
    weight = None  # under autocast: lm_head's weight cast once for all the chunks
    if torch.is_autocast_enabled(hidden.device.type):
        cast = torch.get_autocast_dtype(hidden.device.type)
        weight = model.get_output_embeddings().weight.to(cast)  # (V, D)
    real = (wanted != IGNORE).nonzero()[:, 0]  # (N,) the positions with a label
    kind = torch.promote_types(hidden.dtype, torch.float32)
    losses = torch.zeros(wanted.shape, dtype=kind, device=hidden.device)  # (B*T,)
    parts = []
    for i in range(0, real.numel(), CHUNK):
        at = real[i : i + CHUNK]  # (c,)
        x = output_logits(model, flat[at], weight)  # (c, V)
        x = x.to(torch.promote_types(x.dtype, kind))
        picked = x.gather(1, wanted[at][:, None])[:, 0]  # (c,)
        parts.append(x.logsumexp(-1) - picked)
    if parts:
        losses = losses.index_put((real,), torch.cat(parts))  # out of place: autograd-safe
    return losses.view(labels.shape)  # (B, T)


def _stacked(states: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """(B, width, D) of B (S_b, D) encoder outputs, zero at padding (which is masked)."""
    out = torch.zeros(len(states), width, states[0].size(-1), device=states[0].device)
    for b, e in enumerate(states):
        out[b, : e.size(0)] = e
    return out  # (B, S, D)


def _padded(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N) ids padded at the right with ``pad``, and the (B, N) mask of real tokens."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[b, : len(r)] = 1
    return ids, mask


class HFMeasures:
    """BLEU, loss and gradient scores of a Hugging Face model on a sample, heads removed."""

    loss_row = 0.6  # one teacher-forced pair's time, in greedily decoded sentences (opus-mt)

    def __init__(
        self,
        hm: hf.HFModel,
        sample: HFSample,
        target_lang: str | None = None,
        precision: str = "float32",
    ):
        self.hm, self.sample, self.target_lang = hm, sample, target_lang
        self.device = next(hm.model.parameters()).device
        self.precision = resolved_precision(precision, self.device)
        self.pad = hm.tokenizer.pad_token_id if hm.tokenizer.pad_token_id is not None else 0
        self.heads = {
            (k, i): head_geometry(m)[1]
            for k in KINDS
            for i, m in enumerate(attention_modules(hm.model, k))
        }  # (kind, layer) -> H

    def all_heads(self) -> list[HeadSpec]:
        """Every head, kinds in KINDS order, then layer, then head."""
        return [HeadSpec(k, i, h) for (k, i), n in self.heads.items() for h in range(n)]

    def gates(self, sets: Sequence[Sequence[HeadSpec]], rows: Sequence[int]) -> dict:
        """{(kind, layer): (B, H) gates}: row b is 0 at the heads set ``rows[b]`` removes."""
        table: dict[tuple[str, int], torch.Tensor] = {}
        for b, j in enumerate(rows):
            for h in sets[j]:
                key = (h.kind, h.layer)
                if key not in table:
                    table[key] = torch.ones(len(rows), self.heads[key], device=self.device)
                table[key][b, h.head] = 0.0
        return table

    def computing(self, keep_casts: bool = True):
        """The context of the passes that remove heads: bfloat16 autocast (matrix products
        in bfloat16 accumulated in float32, the activations between them in bfloat16; the
        loss's log-softmax is taken in float32) or plain float32. ``keep_casts``: the
        weights' bfloat16 copies are made once and kept while the context lasts (150 MB at
        opus-mt's size): the decoding phase opens it once around all its passes, whose
        every step reuses them; the teacher-forced phase casts at each use instead (each
        pass uses a weight once; ``label_losses`` casts ``lm_head``'s once per pass), its
        peak 150 MB lower for about the same time."""
        if self.precision == "bfloat16":
            return torch.autocast(self.device.type, torch.bfloat16, cache_enabled=keep_casts)
        return nullcontext()

    def max_new_tokens(self, longest: int) -> int:
        """The longest output of a batch whose longest source has ``longest`` pieces: 1.5x
        plus 5 (French runs about 1.2x English in pieces), at most MAX_LEN; a trained model
        stops at </s> well before, but a removed head can make it repeat itself."""
        return min(MAX_LEN, longest + longest // 2 + 5, self.hm.cfg.max_positions - 1)

    @torch.no_grad()
    def output_ids(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None):
        """Greedy ``generate`` of every sample sentence with each set of heads removed:
        [set][sentence] -> the output ids after the start token (padding after </s>
        included). ``tick(rows)`` after each pass."""
        from transformers.modeling_outputs import BaseModelOutput  # imported only when used

        n, sources = len(self.sample.sources), self.sample.src_ids
        inside = [any(h.kind == "encoder" for h in heads) for heads in sets]
        encoded = self.encoder_states(sources) if not all(inside) else []
        order = sorted(range(n), key=lambda i: len(sources[i]))
        rows = sorted(
            ((j, i) for i in order for j in range(len(sets))), key=lambda r: inside[r[0]]
        )  # sources of like length, the sets that gate the encoder last
        ids: list[list] = [[None] * n for _ in sets]
        forced = hf.forced_bos(self.hm, self.target_lang)
        kwargs = {"forced_bos_token_id": forced} if forced is not None else {}
        with self.computing():  # bfloat16 copies of the weights made once for the phase
            for start in range(0, len(rows), ROWS_PER_PASS):
                chunk = rows[start : start + ROWS_PER_PASS]
                src, mask = _padded([sources[i] for _, i in chunk], self.pad, self.device)
                gates = self.gates(sets, [j for j, _ in chunk])
                if not any(inside[j] for j, _ in chunk):  # the encoder as it is: run once
                    states = _stacked([encoded[i] for _, i in chunk], src.size(1))  # (B, S, D)
                    kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=states)
                out = self._greedy(src, mask, gates, kwargs)  # (B, 1 + T)
                kwargs.pop("encoder_outputs", None)
                for (j, i), row in zip(chunk, out[:, 1:].tolist()):
                    ids[j][i] = row
                if tick:
                    tick(len(chunk))
        give_back_memory()
        return ids

    def _greedy(self, src, mask, gates: dict, kwargs: dict) -> torch.Tensor:
        """(B, 1 + T) greedy ``generate`` of (B, S) sources, each row with its own gates."""
        with rows_gated(self.hm.model, gates):
            return self.hm.model.generate(
                input_ids=src,
                attention_mask=mask,
                num_beams=1,
                do_sample=False,
                max_new_tokens=self.max_new_tokens(src.size(1)),
                **kwargs,
            )

    def outputs(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None):
        """The greedy outputs with each set of heads removed, read as d2l's words:
        [set][sentence] -> words."""
        decode = self.hm.tokenizer.batch_decode
        return [
            [tokenize(text) for text in decode(rows, skip_special_tokens=True)]
            for rows in self.output_ids(sets, tick)
        ]

    def bleu(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None):
        """Corpus BLEU of the greedy outputs with each set of heads removed."""
        return [corpus_bleu(hyps, self.sample.references) for hyps in self.outputs(sets, tick)]

    def _forced(self, pairs: Sequence[tuple[list[int], list[int]]]):
        """Padded (B, S) sources, their mask, (B, T) decoder inputs and (B, T) labels."""
        start = self.hm.model.config.decoder_start_token_id
        src, mask = _padded([s for s, _ in pairs], self.pad, self.device)
        dec, _ = _padded([[start, *t[:-1]] for _, t in pairs], self.pad, self.device)
        labels, real = _padded([t for _, t in pairs], self.pad, self.device)
        return src, mask, dec, labels.masked_fill(real == 0, IGNORE)

    def _token_losses(self, pairs, gates: dict, encoded=None) -> torch.Tensor:
        """(B, T) cross-entropy of each label (0 at padding) with each row's gates.

        ``encoded``: each row's (S, D) encoder output when no gate of the batch is the
        encoder's: the encoder is then not run again."""
        src, mask, dec, labels = self._forced(pairs)
        model = self.hm.model
        with rows_gated(model, gates):
            if encoded is None:
                states = model.get_encoder()(input_ids=src, attention_mask=mask)[0]  # (B, S, D)
            else:
                states = _stacked(encoded, src.size(1))  # (B, S, D)
            hidden = model.get_decoder()(
                input_ids=dec,  # (B, T)
                encoder_hidden_states=states,
                encoder_attention_mask=mask,
                use_cache=False,
            )[0]  # (B, T, D), after the decoder's final norm where it has one
            return label_losses(model, hidden, labels)  # (B, T)

    @torch.no_grad()
    def encoder_states(self, sources: Sequence[Sequence[int]] | None = None) -> list:
        """Each source's (S, D) encoder output with no head removed (by default, the
        source of each pair of the sample)."""
        sources = [src for src, _ in self.sample.encoded] if sources is None else sources
        with self.computing():
            return self._encoded(sources, self.hm.model.get_encoder())

    def _encoded(self, sources, encoder) -> list:
        """encoder_states' passes, FORCED_ROWS sources at a time."""
        out = []
        for start in range(0, len(sources), FORCED_ROWS):
            chunk = sources[start : start + FORCED_ROWS]
            src, mask = _padded(chunk, self.pad, self.device)
            states = encoder(input_ids=src, attention_mask=mask).last_hidden_state  # (B, S, D)
            out += [states[b, : len(ids)] for b, ids in enumerate(chunk)]
        return out

    @torch.no_grad()
    def losses(self, sets: Sequence[Sequence[HeadSpec]], tick: Tick = None):
        """Mean per-token teacher-forced loss over the sample's pairs, for each head set."""
        pairs = self.sample.encoded
        encoded = self.encoder_states()  # reused by the rows whose heads are all decoder-side
        inside = [any(h.kind == "encoder" for h in heads) for heads in sets]
        order = sorted(range(len(pairs)), key=lambda p: (len(pairs[p][0]), len(pairs[p][1])))
        rows = sorted(
            ((j, p) for p in order for j in range(len(sets))), key=lambda r: inside[r[0]]
        )  # pairs of like length, the sets that gate the encoder last
        sums, counts = [0.0] * len(sets), [0] * len(sets)
        with self.computing(keep_casts=False):
            for start in range(0, len(rows), FORCED_ROWS):
                chunk = rows[start : start + FORCED_ROWS]
                gates = self.gates(sets, [j for j, _ in chunk])
                again = any(kind == "encoder" for kind, _ in gates)
                tokens = self._token_losses(
                    [pairs[p] for _, p in chunk],
                    gates,
                    None if again else [encoded[p] for _, p in chunk],
                )  # (B, T)
                for (j, p), row in zip(chunk, tokens.sum(1).tolist()):
                    sums[j] += row
                    counts[j] += len(pairs[p][1])
                if tick:
                    tick(len(chunk))
        give_back_memory()
        return [s / max(c, 1) for s, c in zip(sums, counts)]

    def gradients(self) -> dict[HeadSpec, float]:
        """{HeadSpec: I_h}: mean over pairs of |dL(x)/d xi_h| at gates xi = 1, L(x) the
        pair's mean token loss (one backward pass per batch, each pair its own gates)."""
        pairs = self.sample.encoded
        sums = {key: torch.zeros(h) for key, h in self.heads.items()}
        with torch.enable_grad():
            for start in range(0, len(pairs), GRADIENT_ROWS):
                chunk = pairs[start : start + GRADIENT_ROWS]
                ones = {
                    key: torch.ones(len(chunk), h, device=self.device, requires_grad=True)
                    for key, h in self.heads.items()
                }  # (B, H) each
                tokens = self._token_losses(chunk, ones)  # (B, T)
                counts = torch.tensor([max(len(t), 1) for _, t in chunk], device=self.device)
                losses = tokens.sum(1) / counts  # (B,)
                grads = torch.autograd.grad(losses.sum(), list(ones.values()))  # (B, H) each
                for key, g in zip(ones, grads):
                    sums[key] += g.abs().sum(0).cpu()
        count = max(len(pairs), 1)
        give_back_memory()
        return {
            HeadSpec(k, i, h): float(sums[(k, i)][h]) / count
            for (k, i), n in self.heads.items()
            for h in range(n)
        }


def evaluate_split(
    hm: hf.HFModel, split: Split, max_sentences: int = 0, target_lang: str | None = None
) -> dict:
    """What ``core.model.scores.evaluate_split`` reports of the studio's model, for a Hugging
    Face one: BLEU of greedy ``generate`` (all references, read as d2l's words), the share
    of output pieces that are the tokenizer's unknown token, the mean teacher-forced loss
    per piece over the evaluated sentences' pairs, and sentences per second."""
    n = len(split.groups()) if not max_sentences else min(max_sentences, len(split.groups()))
    measures = HFMeasures(hm, hf_sample(hm, split, n, target_lang), target_lang)
    start = time.perf_counter()
    ids = measures.output_ids([[]])[0]  # [sentence] -> output ids
    seconds = time.perf_counter() - start
    eos, pad = hm.model.config.eos_token_id, measures.pad
    pieces = [t for row in ids for t in (row[: row.index(eos)] if eos in row else row) if t != pad]
    hyps = [tokenize(t) for t in hm.tokenizer.batch_decode(ids, skip_special_tokens=True)]
    return {
        "bleu": corpus_bleu(hyps, measures.sample.references),
        "unk_share": sum(t == hm.tokenizer.unk_token_id for t in pieces) / max(len(pieces), 1),
        "loss": measures.losses([[]])[0],
        "sentences": n,
        "sentences_per_s": n / max(seconds, 1e-9),
    }
