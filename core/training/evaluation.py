"""A training run's evaluation: validation loss, and BLEU with examples for a run that
translates, or its circuit scores for one that does not; the probe maps its snapshot keeps;
whether an evaluation is the run's best.

Each reads a ``core.training.loop.Trainer`` (its model, corpus, validation data and state) and
changes nothing of it; the trainer calls them at every evaluation, rank 0 alone, its random
streams kept.
"""

from __future__ import annotations

import math

from core.model.bleu import corpus_bleu
from core.model.decode import translate_batch
from core.model.scores import evaluate_loss
from core.training.circuits import circuit_scores, circuit_sizes
from core.training.monitor import distributions
from core.training.probes import circuit_probe, probe_maps, probe_sentences, sentence_probes


def evaluation_record(trainer) -> dict:
    """One evaluation's record: validation loss, and multi-reference BLEU on a fixed subset of
    sentences (with three examples) or the circuit scores of a run that does not translate."""
    info = {
        "step": trainer.state.step,
        "epoch": trainer.state.epoch
        + trainer.state.batch_in_epoch / max(trainer.steps_per_epoch, 1),
    }
    info["distributions"] = distributions(trainer.model)  # weights and gradients, per layer group
    if not trainer.val_data:
        return info
    info["val_loss"] = evaluate_loss(trainer.model, trainer.val_data, amp_dtype=trainer.amp_dtype)
    if not trainer.translates:  # the heads scored as the circuits form (induction, lm, encoder)
        n, k = circuit_sizes(trainer.corpus.summary, trainer.model.cfg.max_positions)
        info["circuits"] = circuit_scores(trainer.model, n, k)
        if fills := getattr(trainer.model, "fill_accuracy", None):  # a model that fills masks
            info["val_fill_accuracy"] = fills(trainer.val_data)  # under its fixed eval mask
        return info
    hyps = translate_batch(
        trainer.model,
        trainer.corpus.src_vocab,
        trainer.corpus.tgt_vocab,
        [g[0] for g in trainer.val_groups],
    )
    info["val_bleu"] = corpus_bleu(hyps, [g[1] for g in trainer.val_groups])
    info["examples"] = [
        {"src": " ".join(g[0]), "out": " ".join(h), "ref": " ".join(g[1][0])}
        for g, h in zip(trainer.val_groups[:3], hyps[:3])
    ]
    return info


def snapshot_probes(trainer) -> list[dict]:
    """Translations and attention maps of the probe sentences (``core.training.probes``);
    a run scored by its circuits keeps one pass over the first sequence they read, an
    encoder's (no translation to write) one pass over each probe sentence."""
    direction = trainer.corpus.summary.get("direction", "en-fr")
    sentences = probe_sentences(trainer.cfg.probes, direction)
    if trainer.translates:
        vocabs = (trainer.corpus.src_vocab, trainer.corpus.tgt_vocab)
        return probe_maps(trainer.model, *vocabs, sentences)
    if trainer.task in ("induction", "lm"):
        n, k = circuit_sizes(trainer.corpus.summary, trainer.model.cfg.max_positions)
        return circuit_probe(trainer.model, trainer.corpus.tgt_vocab, min(n, k), k)
    positions = trainer.model.cfg.max_positions
    return sentence_probes(trainer.model, trainer.corpus.src_vocab, sentences, positions)


def is_best(info: dict, state) -> bool:
    """A finite evaluation with a better BLEU, or without BLEU a lower validation loss
    (without a validation split: any finite one)."""
    metrics = [info[k] for k in ("val_loss", "val_bleu") if k in info]
    if not all(math.isfinite(v) for v in metrics):
        return False
    if "val_bleu" in info:
        return info["val_bleu"] > state.best_bleu
    return "val_loss" not in info or info["val_loss"] < state.best_loss
