"""What the one interface derives from one teacher-forced pass with hooks on, for every
family: the record (every site kept, TransformerLens's ``run_with_cache``), a few sites or the
weights or one stack's stream of many sentences, one sentence forced, and the embeddings path
(the token embeddings put in place of the ids' own by hooks on the embedding sites).

``TranslationModel`` inherits ``Passes``; it reads only the door's own methods (``run``,
``hidden``, ``logits_of``, ``masks``, ``hook_points``), so an adapter that implements those has
them all; a one-stack adapter overrides ``record``, ``patterns`` and ``stream`` for its one
sequence.

Shape key: L layers, B batch, S source tokens, T decoder steps, D model width, H heads,
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from core.model.hooks import Hook, capture, hooked, replace_with
from core.model.record import KINDS, Record, attention_site, from_cache, recorded_sites


class Passes:
    """A model's passes with hooks on, derived from its ``run``, ``hidden`` and hook sites."""

    def hooks(self, pairs: Iterable[tuple[str, Hook]]):
        """A context with these (site, hook) pairs on, in this thread."""
        return hooked(self.hook_points(), pairs)

    def record(self, src, tgt_in, out_ids=None) -> Record:
        """One teacher-forced pass of (B, S) sources and (B, T) decoder inputs, every site
        kept (the caller chooses eval mode and gradients; ``out_ids`` the tokens predicted)."""
        cache: dict = {}
        points = self.hook_points()
        sites = [s for s in recorded_sites(*self.depth) if s in points]
        with self.hooks((s, capture(cache)) for s in sites):
            logits = self.run(src, tgt_in, need_weights=True)
        return from_cache(cache, src, tgt_in, self.masks(src, tgt_in), logits, self.depth, out_ids)

    def captured(self, src, tgt_in, sites: Sequence[str]) -> dict[str, torch.Tensor]:
        """Only the named sites of one teacher-forced pass (``record`` keeps every site: a
        caller reading a few of many sentences keeps a fraction of its memory)."""
        cache: dict = {}
        with self.hooks((s, capture(cache)) for s in sites):
            self.run(src, tgt_in, need_weights=True)  # the record's arithmetic, to the bit
        return cache

    def patterns(self, src, tgt_in, kinds: Sequence[str] = KINDS) -> dict[str, torch.Tensor]:
        """{kind: (L, B, H, Tq, Tk)}: the weights of one teacher-forced pass, as ``record``'s."""
        names = {
            k: [f"{attention_site(k, i)}.pattern" for i in range(self.layers(k))] for k in kinds
        }
        cache = self.captured(src, tgt_in, [n for ns in names.values() for n in ns])
        return {k: torch.stack([cache[n] for n in ns]) for k, ns in names.items()}

    def stream(self, src, tgt_in, side: str) -> list[torch.Tensor]:
        """L + 1 x (B, S|T, D): one stack's residual stream in a teacher-forced pass, as
        ``record(...).stream(side)``."""
        last = self.depth[0 if side == "encoder" else 1] - 1
        sites = [*(f"{side}.{i}.in" for i in range(last + 1)), f"{side}.{last}.out"]
        cache = self.captured(src, tgt_in, sites)
        return [cache[s] for s in sites]

    def forced(self, src_ids: Sequence[int], out_ids: Sequence[int]) -> Record:
        """The record of one sentence: ``out_ids`` teacher-forced after ``src_ids``, in eval
        mode; its ``logp`` is each output token's log-probability."""
        src, tgt_in, out = self.forced_batch(src_ids, out_ids)
        with self.evaluating(), torch.no_grad():
            return self.record(src, tgt_in, out)

    def forced_batch(self, src_ids: Sequence[int], out_ids: Sequence[int]):
        """((1, S) source, (1, T) decoder inputs, (1, T) outputs) of one sentence;
        ValueError when there is no output."""
        if not len(out_ids):
            raise ValueError("There is no output to feed the decoder: translate a sentence first.")
        src = torch.tensor([list(src_ids)], device=self.device)  # (1, S)
        tgt_in = torch.tensor([self.decoder_inputs(out_ids)], device=self.device)  # (1, T)
        return src, tgt_in, torch.tensor([list(out_ids)], device=self.device)  # (1, T)

    # ------------------------------------------------------------------ embeddings path

    @torch.no_grad()
    def embeddings(self, src, tgt_in) -> tuple[torch.Tensor, torch.Tensor]:
        """((B, S, D), (B, T, D)) the token embeddings the stacks read (the embedding
        modules' outputs: a √D scale the model applies after them is not in them)."""
        seen: dict = {}
        with self.hooks((site, capture(seen)) for site in ("encoder.embed", "decoder.embed")):
            self.run(src, tgt_in)  # (B, T, V): the whole pass
        return seen["encoder.embed"], seen["decoder.embed"]

    def log_probs_from_embeddings(self, src, tgt_in, src_emb, tgt_emb) -> torch.Tensor:
        """(B, T, V) log-probabilities with the token embeddings (B, S, D), (B, T, D) put in
        place of the ids' own (``src``/``tgt_in`` (1, .) or (B, .) ids, for positions and
        masks): exactly the function the ids path computes, whatever the family scales."""
        B = src_emb.size(0)
        src, tgt_in = src.expand(B, -1), tgt_in.expand(B, -1)
        pairs = [("encoder.embed", replace_with(src_emb)), ("decoder.embed", replace_with(tgt_emb))]
        with self.hooks(pairs):
            return self.run(src, tgt_in).float().log_softmax(-1)

    def log_probs_at(self, src, tgt_in, src_emb, tgt_emb, steps) -> list[torch.Tensor]:
        """P x (B, V): the log-probabilities at P chosen steps of every row, with the token
        embeddings (B, S, D), (B, T, D) put in place as ``log_probs_from_embeddings`` does (its
        (B, T, V) at those steps, without projecting the other steps onto the vocabulary;
        ``tgt_in`` and ``tgt_emb`` may stop after the last step asked, as a causal decoder's
        later steps change none of the earlier ones). Each step is projected on its own, so
        that one step's gradient runs back through its own projection only (through all P of
        them, P times over P steps, it was a quarter of integrated gradients' time with
        opus-mt's 59k-piece vocabulary)."""
        B = src_emb.size(0)
        src, tgt_in = src.expand(B, -1), tgt_in.expand(B, -1)
        pairs = [("encoder.embed", replace_with(src_emb)), ("decoder.embed", replace_with(tgt_emb))]
        with self.hooks(pairs):
            hidden = self.hidden(src, tgt_in)  # (B, T, D)
        return [self.logits_of(hidden[:, t]).float().log_softmax(-1) for t in steps]  # (B, V)
