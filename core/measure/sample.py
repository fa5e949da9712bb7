"""The validation sample every measurement on many sentences reads (head importance,
faithfulness, the projector), encoded by the model's own tokens, and the key its cached
results are stored under.

The sample is the first N source sentences of a validation split, each with all its
references. The split's sentences are d2l's words ("i'm home ."); a model reads them through
``TranslationModel.words_to_source`` / ``words_to_target`` (a Hugging Face tokenizer is
given them back as text).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from core.corpus.config import DataConfig
from core.corpus.source import DataError, file_sha1, fra_eng_copy
from core.corpus.splits import Split, load_splits
from core.measure.progress import check_time
from core.model.interface import TranslationModel
from core.model.opened import model_sha1
from core.model.parts import MAX_LEN


@dataclass
class Sample:
    """Validation sentences with all their references, encoded by one model."""

    sources: list[list[str]]  # N source sentences in d2l's words
    references: list[list[list[str]]]  # all reference translations of each, in words
    src_ids: list[list[int]]  # N sources as the model's ids (its specials included)
    encoded: list[tuple[list[int], list[int]]]  # every (source ids, output ids + end) pair


def sample_of(m: TranslationModel, split: Split, n: int, target_lang: str | None = None):
    """The first ``n`` source sentences of ``split``, encoded by the model."""
    groups = split.groups()[:n]
    ids = [m.words_to_source(src) for src, _ in groups]
    encoded = [
        (src, m.words_to_target(ref, target_lang))
        for src, (_, refs) in zip(ids, groups)
        for ref in refs
    ]
    return Sample([g[0] for g in groups], [g[1] for g in groups], ids, encoded)


def validation_sample(
    m: TranslationModel,
    cfg: DataConfig,
    n: int,
    target_lang: str | None = None,
    split: Split | None = None,
) -> Sample:
    """The first ``n`` validation sentences of the split these settings rebuild (or of
    ``split``, the pairs a saved model carries)."""
    split = split if split is not None else load_splits(cfg, tick=check_time).val
    if not split.pairs:
        raise DataError(
            "This model was trained without a validation split: there are no validation "
            "sentences to measure on."
        )
    return sample_of(m, split, n, target_lang)


def sample_key(checkpoint, cfg: DataConfig, sentences: int, **facts) -> str:
    """Cache key of a result on a validation sample: checkpoint content, data settings,
    corpus file, sample size and the result's own ``facts`` (its version, its options)."""
    corpus = fra_eng_copy() if cfg.source == "fra-eng" else Path(cfg.source)
    facts = {
        "checkpoint": model_sha1(checkpoint),
        "data": asdict(cfg) | {"source": "fra-eng" if cfg.source == "fra-eng" else ""},
        "corpus": file_sha1(corpus) if corpus else "",
        "sentences": int(sentences),
        "max_len": MAX_LEN,
        **facts,
    }
    return hashlib.sha1(json.dumps(facts, sort_keys=True).encode()).hexdigest()
