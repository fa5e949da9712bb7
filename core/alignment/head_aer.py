"""Each cross-attention head's AER over training: the trajectories the page and command read.

``core.attention.trajectories`` measures every head at every snapshot; this module, a layer
above it, adds what only alignment knows: the AER of each cross head (AWO, argmax links) on
the shipped gold set, from a snapshot's model when it has one, and from the probe maps
alone when a probe sentence and the output it got at that step are a gold pair; and what
only attribution knows: the share of the source in the model's predictions at each step
(ALTI+, Voita et al. 2021's question of how much a prediction draws on the source).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core.alignment.aer import score
from core.alignment.extract import Reader, from_sentence, links
from core.alignment.gold import studio_gold
from core.alignment.grid import alignment_grid
from core.attention.sentence_maps import SentenceMaps
from core.attention.trajectories import (
    SENTENCES,
    STORED_KEY,
    Rows,
    Trajectories,
    stored_section,
    trajectories,
)
from core.attribution.methods import attribute
from core.corpus.bpe import join_pieces
from core.corpus.source import DataError
from core.measure.progress import ProgressFn, check_time
from core.model.interface import TranslationModel
from core.runs.history import add_section, history_path

MODE = "awo"  # read at the step that predicts each word (the better mode on our models)


def cross_head_aer(lm: TranslationModel) -> dict[tuple[int, int], float]:
    """{(layer, head): AER} of every cross head of a model on the shipped gold set."""
    pairs, gold = studio_gold()
    cfg = lm.cfg
    only = [
        Reader(layer, head, MODE)
        for layer in range(cfg.num_decoder_layers)
        for head in range(cfg.num_heads)
    ]
    grid = alignment_grid(lm, pairs, gold, only=only)
    return {(int(r.layer), int(r.head)): r.aer for r in grid.rows}


def probe_head_aer(probes: Sequence[SentenceMaps]) -> dict[tuple[int, int], float] | None:
    """{(layer, head): AER} over the probes whose sentence and output are a gold pair; None
    when none is (a probe's own output is scored only where the gold set aligns it)."""
    pairs, gold = studio_gold()
    index = {(tuple(src), tuple(tgt)): g for (src, tgt), g in zip(pairs, gold)}
    matched = []
    for maps in probes:
        src = join_pieces([t for t in maps.src_tokens if t != "<eos>"])
        out = join_pieces([t for t in maps.output_tokens if t != "<eos>"])
        if (found := index.get((tuple(src), tuple(out)))) is not None:
            matched.append((from_sentence(maps.cross, maps.src_tokens, maps.output_tokens), found))
    if not matched:
        return None
    layers, heads = probes[0].cross.shape[:2]
    return {
        (layer, head): score(
            [links(m, Reader(layer, head, MODE)) for m, _ in matched], [g for _, g in matched]
        ).aer
        for layer in range(layers)
        for head in range(heads)
    }


def source_share(lm: TranslationModel, rows: Rows) -> float:
    """The source's share in predicting each reference token, by ALTI+ (Ferrando et al. 2022):
    the mean over a sentence's tokens (<eos> included), then over sentences; NaN for none."""
    shares = []
    for src, tgt in rows:
        check_time()  # a shared server's limit for one heavy job
        shares.append(float(attribute(lm, src, [*tgt, lm.eos_id], "alti").source_share.mean()))
    return float(np.mean(shares)) if shares else float("nan")


def head_trajectories(
    source,
    checkpoint=None,
    sentences: int = SENTENCES,
    validation: str = "measure",
    progress: ProgressFn | None = None,
) -> Trajectories:
    """Every head's trajectory over a run's or history file's snapshots, AER included (cached);
    what the Attention page and ``python -m core.trajectories`` show."""
    return trajectories(
        source,
        checkpoint,
        sentences,
        validation,
        aer=cross_head_aer,
        probe_aer=probe_head_aer,
        share=source_share,
        progress=progress,
    )


def store_in_history(
    run_dir,
    checkpoint,
    up_to_step: int | None = None,
    sentences: int = SENTENCES,
    progress: ProgressFn | None = None,
) -> Path | None:
    """Measure the run's validation numbers at every step with a model (up to the model's
    step) and keep them in ``checkpoint``'s ``.history`` file, so that a model copied out of
    its run shows them without the run or the corpus; None when there is no history file.
    DataError, keeping nothing, when no step could be measured (e.g. the corpus is gone)."""
    path = history_path(checkpoint)
    if not path.is_file():
        return None
    t = head_trajectories(run_dir, None, sentences, "measure", progress=progress)
    section = stored_section(t, up_to_step)
    if not section["steps"] and t.notes:
        reasons = dict.fromkeys(note.split(": ", 1)[-1] for note in t.notes)  # once each
        kept = len(t.model_steps)
        raise DataError(f"none of the {kept} kept models could be measured: " + " ".join(reasons))
    add_section(path, STORED_KEY, section)
    return path
