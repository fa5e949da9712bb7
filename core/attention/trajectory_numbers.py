"""A head's numbers at one step of training, from its attention maps: the mean row entropy,
the diagonality, the weight on the previous position and the share on <bos>/<eos>, over
probe sentences as the model translated them or over teacher-forced validation pairs.
``core.attention.trajectories`` collects them over a run's snapshots.

Shape key: L layers, B sentences, H heads, Tq queries, Tk keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from core.attention.head_stats import NEAR_DIAGONAL_KEYS
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.measure.progress import check_time
from core.model.interface import TranslationModel

MAP_METRICS = ("entropy", "diagonal", "previous", "special")  # read from the maps alone
BATCH = 64  # sentences teacher-forced together


def batch_metrics(w: np.ndarray, q_len: np.ndarray, k_len: np.ndarray, kind: str) -> dict:
    """Entropy, diagonality, previous-position weight and <bos>/<eos> share of each head.

    Args:
        w: (L, B, H, Tq, Tk) attention, padded (padded keys hold no weight).
        q_len, k_len: (B,) real queries and keys of each sentence.
        kind: "encoder", "decoder_self" or "cross" (decides the diagonal and the special key:
            <eos>, the last key, for encoder and cross; <bos>, the first, for decoder self).

    Returns:
        {metric: (L, B, H)}, each the mean over the sentence's real rows ("previous" is NaN
        for cross attention).
    """
    _, n, _, tq, tk = w.shape
    rows = np.arange(tq)[None, :] < q_len[:, None]  # (B, Tq)
    logs = np.log(w, out=np.zeros_like(w), where=w > 0)
    entropy = -(w * logs).sum(axis=-1)  # (L, B, H, Tq)
    keys = np.arange(tk)[None, None, :]  # (1, 1, Tk)
    q = np.arange(tq)[None, :, None]  # (1, Tq, 1)
    if kind == "cross":  # nearest proportional key, as head_stats.diagonal_keys
        scale = (k_len - 1) / np.maximum(q_len - 1, 1)  # (B,)
        centre = np.floor(q * scale[:, None, None] + 0.5)  # (B, Tq, 1)
        near = np.abs(keys - centre) <= NEAR_DIAGONAL_KEYS  # (B, Tq, Tk)
    else:
        near = keys == q  # (1, Tq, Tk)
    diagonal = (w * near[None, :, None]).sum(axis=-1)  # (L, B, H, Tq)
    previous = (w * (keys == q - 1)[None, :, None]).sum(axis=-1)  # (L, B, H, Tq)
    if kind == "cross":
        previous = np.full_like(previous, np.nan)
    special_key = np.zeros(n, dtype=int) if kind == "decoder_self" else k_len - 1  # (B,)
    special = np.take_along_axis(w, special_key[None, :, None, None, None], axis=-1)[..., 0]
    weight = rows / np.maximum(q_len, 1)[:, None]  # (B, Tq): a mean over real rows
    values = {"entropy": entropy, "diagonal": diagonal, "previous": previous}
    values["special"] = special
    return {name: np.einsum("lbhq,bq->lbh", v, weight) for name, v in values.items()}


def probe_means(probes: Sequence[SentenceMaps]) -> dict:
    """{kind: {metric: (L, H)}}: the heads' numbers averaged over the probe sentences, of
    the kinds every probe draws (a one-stack model's snapshot holds one kind:
    ``SentenceMaps.drawn_kinds``)."""
    out = {}
    for kind in [k for k in KINDS if all(k in maps.drawn_kinds for maps in probes)]:
        per = []
        for maps in probes:
            w = maps.weights(kind).astype(np.float64)[:, None]  # (L, 1, H, Tq, Tk)
            size = np.array([w.shape[-2]]), np.array([w.shape[-1]])
            per.append(batch_metrics(w, *size, kind))
        out[kind] = {m: np.mean([p[m][:, 0] for p in per], axis=0) for m in MAP_METRICS}
    return out


def teacher_forced_rows(m: TranslationModel, sample) -> list[tuple[list[int], list[int]]]:
    """(source ids + <eos>, reference ids) of each sample sentence, its first reference."""
    return [
        (list(map(int, ids)), m.words_to_target(refs[0])[:-1])
        for ids, refs in zip(sample.src_ids, sample.references)
    ]


@torch.no_grad()
def validation_means(m: TranslationModel, rows: Sequence[tuple[list[int], list[int]]]) -> dict:
    """{kind: {metric: (L, H)}} over teacher-forced pairs, each sentence weighing the same."""
    sums, device = {}, m.device
    with m.evaluating():
        for start in range(0, len(rows), BATCH):
            check_time()  # a shared server's limit for one heavy job
            chunk = rows[start : start + BATCH]
            s_len = np.array([len(s) for s, _ in chunk])
            t_len = np.array([len(t) + 1 for _, t in chunk])  # <bos> + reference
            src = torch.full((len(chunk), s_len.max()), m.pad_id, dtype=torch.long)
            tgt = torch.full((len(chunk), t_len.max()), m.pad_id, dtype=torch.long)
            for i, (s, t) in enumerate(chunk):
                src[i, : len(s)] = torch.tensor(s)
                tgt[i, : len(t) + 1] = torch.tensor([m.start_id, *t])
            maps = m.patterns(src.to(device), tgt.to(device))  # {kind: (L, B, H, Tq, Tk)}
            lengths = {"encoder": (s_len, s_len), "decoder_self": (t_len, t_len)}
            lengths["cross"] = (t_len, s_len)
            for kind in KINDS:
                w = maps[kind].float().cpu().numpy()  # (L, B, H, Tq, Tk)
                for metric, v in batch_metrics(w, *lengths[kind], kind).items():
                    sums.setdefault(kind, {}).setdefault(metric, 0.0)
                    sums[kind][metric] = sums[kind][metric] + v.sum(axis=1)  # (L, H)
    n = max(len(rows), 1)
    return {k: {metric: v / n for metric, v in ms.items()} for k, ms in sums.items()}
