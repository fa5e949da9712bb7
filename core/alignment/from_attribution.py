"""Word alignments from a token-attribution method instead of raw cross-attention.

For each target piece y_t, an attribution method (``core.attribution``) gives how much each
source piece contributed to log p(y_t); its source part, read as a (T, S) map, aligns
exactly as attention does (``core.alignment.extract``): AWO only, since row t already
explains the step that predicts y_t. The ALTI authors found raw cross-attention of a low
layer aligns better than ALTI in their model; ``attribution_scores`` measures it here.

Shape key: T target pieces + 1 (<eos>), S source pieces + <eos>.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.alignment.aer import score
from core.alignment.extract import PairMaps, Reader, encoded, links, reads_french
from core.alignment.gold import GoldLinks
from core.attribution.methods import attribute
from core.measure.progress import check_time
from core.model.interface import TranslationModel

AWO = Reader(0, 0, "awo")  # a one-layer, one-head "map": the attribution's source part


def attribution_maps(m: TranslationModel, pairs: Sequence, method: str) -> list[PairMaps]:
    """Each pair's source contributions as a (1, 1, T, S) map with its piece words (the
    specials a tokenizer puts around a sentence left out)."""
    out, turned = [], reads_french(m)
    for w in encoded(m, pairs, english_first=True):
        check_time()  # a shared server's limit for one heavy job
        source = attribute(m, w.src_ids, w.out_ids, method).source  # (T, S)
        kept = source[w.target_rows(), w.source_columns()][None, None].astype(np.float32)
        words = (np.array(x, dtype=np.int64) for x in (w.src_words, w.tgt_words))
        out.append(PairMaps(np.ascontiguousarray(kept), *words, turned))
    return out


def attribution_scores(lm: TranslationModel, pairs, gold: Sequence[GoldLinks], method: str) -> dict:
    """AER, precision and recall of one method's argmax links (AWO) on a gold set."""
    maps = attribution_maps(lm, pairs, method)
    s = score([links(m, AWO) for m in maps], list(gold))
    return {"method": method, "mode": "awo", "aer": s.aer, "precision": s.precision} | {
        "recall": s.recall,
        "pairs": s.pairs,
    }
