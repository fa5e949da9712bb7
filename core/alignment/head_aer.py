"""Each cross-attention head's AER over training: the trajectories the page and command read.

``core.attention.trajectories`` measures every head at every snapshot; this module, a layer
above it, adds what only alignment knows: the AER of each cross head (AWO, argmax links) on
the shipped gold set, from a snapshot's model when it has one, and from the probe maps
alone when a probe sentence and the output it got at that step are a gold pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.alignment.aer import score
from core.alignment.extract import Reader, from_sentence, links
from core.alignment.gold import studio_gold
from core.alignment.grid import alignment_grid
from core.attention.importance import ProgressFn
from core.attention.sentence_maps import SentenceMaps
from core.attention.trajectories import SENTENCES, Trajectories, trajectories
from core.corpus.bpe import join_pieces
from core.model.checkpoints import LoadedModel

MODE = "awo"  # read at the step that predicts each word (the better mode on our models)


def cross_head_aer(lm: LoadedModel) -> dict[tuple[int, int], float]:
    """{(layer, head): AER} of every cross head of a model on the shipped gold set."""
    pairs, gold = studio_gold()
    cfg = lm.model.cfg
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
        progress=progress,
    )
