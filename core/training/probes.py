"""The probe sentences a run translates at each evaluation: their translations and attention
maps as the run's snapshots keep them (float16, CPU), the training's random streams untouched.

A run whose model writes no translation keeps one pass over a sequence instead
(``sequence_probe``): a run on the induction or lm task the first of the sequences its circuit
scores read (``core.training.circuits``), an encoder each probe sentence as it reads a source
(``<bos> sentence <eos>``). A snapshot holds the three kinds of maps whatever the model: a
causal stack's pass is its decoder self-attention, a bidirectional one's its encoder
self-attention, and the kinds it lacks are empty (``SentenceMaps.drawn_kinds``).

Shape key: L layers, H heads, N tokens of the sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.corpus.text import D2L_TEST_PAIRS
from core.corpus.vocab import Vocab
from core.model.decode import prepare_source, translate
from core.model.parts import TranslationError
from core.model.transformer import Transformer
from core.training.circuits import circuit_sequences
from core.training.config import D2L_PROBES
from core.training.random_streams import kept_random_streams


def probe_sentences(probes: Sequence[str], direction: str) -> list[str]:
    """The sentences a run translates at each evaluation: its probes, or, for a French→English
    run that kept the default (d2l's English sentences), their French references."""
    if direction == "fr-en" and list(probes) == D2L_PROBES:
        return [reference for _, reference in D2L_TEST_PAIRS]
    return list(probes)


def probe_maps(
    model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, sentences: Sequence[str]
) -> list[dict]:
    """Each probe's tokens and maps (a probe the model cannot translate is left out)."""
    probes = []
    for sentence in sentences:
        try:
            with kept_random_streams():
                t = translate(model, src_vocab, tgt_vocab, sentence)
        except TranslationError:
            continue
        maps = t.attention
        probes.append(
            {
                "sentence": sentence,
                "src_tokens": t.src_tokens,
                "output_tokens": t.output_tokens,
                "decoder_inputs": t.decoder_inputs,
                "encoder": maps.encoder.half(),
                "decoder_self": maps.decoder_self.half(),
                "cross": maps.cross.half(),
            }
        )
    return probes


@torch.no_grad()
def sequence_probe(model: torch.nn.Module, ids: list[int], tokens: list[str], name: str) -> dict:
    """One pass of a one-stack model over ``ids`` as a snapshot's probe: its ``patterns``
    (L, H, N, N) as decoder self-attention where the model writes token by token
    (``decodes``), else as encoder self-attention; the other kinds empty."""
    training = model.training
    model.eval()
    try:
        with kept_random_streams():
            w = model.patterns(torch.tensor([ids], device=next(model.parameters()).device))
    finally:
        model.train(training)
    w = w[:, 0].float().cpu().half()  # (L, H, N, N)
    n_layers, heads, n = w.shape[:3]
    none = w.new_zeros((n_layers, heads, 0, 0))  # (L, H, 0, 0)
    if model.decodes:  # causal: each position reads the ones before it
        maps = {"encoder": none, "decoder_self": w, "cross": w.new_zeros((n_layers, heads, n, 0))}
        read = {"src_tokens": [], "output_tokens": list(tokens), "decoder_inputs": list(tokens)}
    else:  # bidirectional: the sequence over itself
        maps = {"encoder": w, "decoder_self": none, "cross": w.new_zeros((n_layers, heads, 0, n))}
        read = {"src_tokens": list(tokens), "output_tokens": [], "decoder_inputs": []}
    return {"sentence": name, **read, **maps}


def circuit_probe(model: torch.nn.Module, vocab: Vocab, n: int, types: int) -> list[dict]:
    """The snapshot of a run scored by its circuits: one pass over the first of the sequences
    its scores read, ``[bos, a, a]`` (``core.training.circuits.circuit_sequences``)."""
    ids = circuit_sequences(n, types, sequences=1)[0].tolist()  # (2n + 1,)
    tokens = vocab.decode(ids)
    return [sequence_probe(model, ids, tokens, " ".join(tokens[1:]))]


def sentence_probes(
    model: torch.nn.Module, vocab: Vocab, sentences: Sequence[str], positions: int
) -> list[dict]:
    """The snapshot of an encoder run: each probe sentence read as ``<bos> sentence <eos>``
    (its [CLS] source [SEP], the first part of what it learns from)."""
    probes = []
    for sentence in sentences:
        try:
            ids, src_tokens, _, _ = prepare_source(sentence, vocab, positions - 1)
        except TranslationError:
            continue
        bos = vocab.decode([Vocab.bos_id])
        probes.append(sequence_probe(model, [Vocab.bos_id, *ids], bos + src_tokens, sentence))
    return probes
