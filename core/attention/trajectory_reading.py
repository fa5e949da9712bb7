"""Reading head trajectories: each head's largest change, when heads specialise, the stages
of training (a heuristic), and what changed between two steps; ``readings`` gathers what the
"Over training" page shows for ``python -m core.trajectories`` to print.

Tables are ``Trajectories.frame(basis)``: one row per (step, kind, layer, head).

**Stages (heuristic).** Voita et al. (2021) found NMT training goes through a target-side
language-model stage, then word-by-word translation, then reordering, by measuring how much
predictions draw on the source. Attention weights alone cannot measure that; this reads two
signals off the cross-attention heads instead, and says so wherever it is shown:

- *source focus*: how far the cross heads' mean entropy has fallen from its highest to its
  lowest over the run (0 = as diffuse as it ever was, 1 = as sharp). Before it is halfway the
  decoder does not yet look at any particular source word: **target-side LM**.
- *cross diagonality*: the cross heads' mean share near the rescaled diagonal. From halfway
  focus until diagonality peaks: **word-by-word**. After the peak, if diagonality falls by at
  least ``REORDER_DROP`` while the focus stays past halfway: **reordering** (sharp but off
  the diagonal). A run that never gets there is said not to.

Shape key: L layers, H heads, Tq queries, Tk keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.attention.head_stats import PATTERN_SHARE
from core.attention.kinds import KINDS
from core.attention.sentence_maps import SentenceMaps
from core.attention.trajectories import BASES, Trajectories

HEAD = ["kind", "layer", "head"]
HALFWAY = 0.5  # source focus past this share of its rise: the decoder reads the source
REORDER_DROP = 0.02  # cross diagonality this far below its peak (focus kept): reordering
STAGES = ("target-side LM", "word-by-word", "reordering")
PATTERNS = {  # a head's pattern at a step, Voita et al. 2019's names where they apply
    "previous": "positional (previous token)",
    "diagonal": "positional (own token)",
    "monotonic": "monotonic (source order)",
    "special": "<bos>/<eos> sink",
}
NO_PATTERN = "none yet"


def largest_change(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each head's step of largest change in ``metric`` between consecutive snapshots.

    Returns one row per head: kind, layer, head, step (the later step of the biggest jump),
    change (signed), value (at that step); heads with fewer than two numbers are left out.
    """
    rows = []
    for (kind, layer, head), h in table.sort_values("step").groupby(HEAD, sort=False):
        h = h[h[metric].notna()]
        if len(h) < 2:
            continue
        jumps = np.diff(h[metric].to_numpy())
        i = int(np.argmax(np.abs(jumps)))
        step, value = int(h["step"].iloc[i + 1]), float(h[metric].iloc[i + 1])
        where = {"kind": kind, "layer": layer, "head": head, "step": step}
        rows.append(where | {"change": float(jumps[i]), "value": value})
    return pd.DataFrame(rows, columns=[*HEAD, "step", "change", "value"])


WHOLE = ("layer", "head", "step", "since")  # columns of whole numbers (pandas may hold floats)


def _plain(column: str, value):
    """One cell as JSON: NaN as None, numpy scalars as Python's, a ``WHOLE`` column's as int."""
    if pd.isna(value):
        return None
    value = value.item() if isinstance(value, np.generic) else value
    return int(value) if column in WHOLE else value


def table_rows(table: pd.DataFrame) -> list[dict]:
    """A reading's table as JSON-able rows (the rows of ``largest_change`` and
    ``specialisation`` a command prints)."""
    return [{k: _plain(k, v) for k, v in row.items()} for row in table.to_dict("records")]


def step_difference(table: pd.DataFrame, step_a: int, step_b: int, metric: str) -> pd.DataFrame:
    """Every head's ``metric`` at A and B and B − A, the largest |B − A| first."""
    a = table[table["step"] == step_a].set_index(HEAD)[metric].rename("a")
    b = table[table["step"] == step_b].set_index(HEAD)[metric].rename("b")
    both = pd.concat([a, b], axis=1).dropna().reset_index()
    both["b_minus_a"] = both["b"] - both["a"]
    order = both["b_minus_a"].abs().sort_values(ascending=False, kind="stable").index
    return both.loc[order].reset_index(drop=True)


def pattern(row, kind: str) -> str:
    """A head's pattern at one step (a key of PATTERNS, or NO_PATTERN)."""
    if kind != "cross" and row["previous"] >= PATTERN_SHARE:
        return "previous"
    if row["diagonal"] >= PATTERN_SHARE:
        return "monotonic" if kind == "cross" else "diagonal"
    if row["special"] >= PATTERN_SHARE:
        return "special"
    return NO_PATTERN


def specialisation(table: pd.DataFrame) -> pd.DataFrame:
    """When each head took the pattern it ends with: kind, layer, head, pattern, since (step;
    None when it ends with none). A head that keeps its pattern from the first step has it
    ``since`` that step: it may have had it from the start."""
    rows = []
    for (kind, layer, head), h in table.sort_values("step").groupby(HEAD, sort=False):
        labels = [pattern(r, kind) for _, r in h.iterrows()]
        final, steps = labels[-1], h["step"].tolist()
        i = len(labels) - 1
        while i > 0 and labels[i - 1] == final:
            i -= 1
        since = None if final == NO_PATTERN else int(steps[i])
        name = PATTERNS.get(final, NO_PATTERN)
        rows.append({"kind": kind, "layer": layer, "head": head, "pattern": name, "since": since})
    return pd.DataFrame(rows, columns=[*HEAD, "pattern", "since"])


@dataclass
class Stages:
    """The stage heuristic over a run: its two signals and each step's stage."""

    steps: list[int]
    focus: list[float]  # source focus, 0..1 (see the module's docstring)
    diagonal: list[float]  # cross diagonality
    stage: list[str]  # one of STAGES per step
    seen: list[str] = field(default_factory=list)  # stages the run went through, in order

    def spans(self) -> list[tuple[str, int, int]]:
        """(stage, first step, last step) of each run of one stage."""
        out: list[tuple[str, int, int]] = []
        for step, name in zip(self.steps, self.stage):
            if out and out[-1][0] == name:
                out[-1] = (name, out[-1][1], step)
            else:
                out.append((name, step, step))
        return out

    def summary(self) -> str:
        """The stages in words, e.g. "target-side LM (steps 250–500), then word-by-word …"."""
        parts = [
            f"{n} (steps {a:,}–{b:,})" if a != b else f"{n} (step {a:,})"
            for n, a, b in self.spans()
        ]
        missing = [s for s in STAGES if s not in self.seen]
        text = ", then ".join(parts)
        return text + (f"; not seen: {', '.join(missing)}" if missing else "")


def stages(table: pd.DataFrame) -> Stages | None:
    """The stage heuristic over the cross heads' trajectories; None with fewer than 3 steps."""
    cross = table[table["kind"] == "cross"].groupby("step")[["entropy", "diagonal"]].mean()
    if len(cross) < 3:
        return None
    entropy, diagonal = cross["entropy"].to_numpy(), cross["diagonal"].to_numpy()
    spread = entropy.max() - entropy.min()
    focus = (entropy.max() - entropy) / spread if spread > 0 else np.zeros_like(entropy)
    focused = np.flatnonzero(focus >= HALFWAY)
    first = int(focused[0]) if focused.size else len(entropy)
    peak = first + int(np.argmax(diagonal[first:])) if first < len(entropy) else len(entropy)
    dropped = [
        i
        for i in range(peak + 1, len(entropy))
        if diagonal[i] <= diagonal[peak] - REORDER_DROP and focus[i] >= HALFWAY
    ]
    reorder = dropped[0] if dropped else len(entropy)  # stages follow each other, never back
    labels = [
        STAGES[0] if i < first else STAGES[1] if i < reorder else STAGES[2]
        for i in range(len(entropy))
    ]
    seen = [s for s in STAGES if s in labels]
    return Stages(cross.index.tolist(), focus.tolist(), diagonal.tolist(), labels, seen)


SHARE_DIP = 0.01  # the source share this far below where it started (and back up from its
# lowest): a dip (Voita et al. 2021)


def source_share_reading(model: pd.DataFrame) -> str | None:
    """The source share over training in words (``Trajectories.model_frame()``); None with
    fewer than two measured steps.

    Voita et al. (2021) measured it (with LRP) and saw it fall first, while the model is a
    target-side language model, then rise as it learns to translate. This says where the
    share started, where it was lowest, and where it ended, and whether it dipped first."""
    m = model[model["source_share"].notna()].sort_values("step")
    if len(m) < 2:
        return None
    steps, share = m["step"].to_numpy(), m["source_share"].to_numpy()
    low = int(np.argmin(share))
    text = (
        f"source share of the predictions (ALTI+, validation sentences) {share[0]:.3f} at step "
        f"{steps[0]:,}, lowest {share[low]:.3f} at step {steps[low]:,}, {share[-1]:.3f} at "
        f"step {steps[-1]:,}"
    )
    rose = share[low:].max() >= share[low] + SHARE_DIP  # a wobble at the bottom is no rise
    if 0 < low < len(share) - 1 and share[low] <= share[0] - SHARE_DIP and rose:
        return text + ": it fell first, then rose (the dip Voita et al. 2021 saw in the LM stage)"
    if share[-1] > share[0]:
        return text + ": it rose from the first measurement (no dip seen at these steps)"
    return text + ": it did not rise over the run"


def readings(result: Trajectories) -> dict:
    """What the Attention page's "Over training" reads off a run's trajectories, by the
    functions it calls on the tables it passes them, as JSON: ``stages`` (the summary, None
    under 3 steps), ``source_share_reading`` (its "Measured:" line), ``specialisation`` (the
    "When heads specialise" table, of the probes) and ``largest_change`` (the chart's stars:
    per basis measured, per metric it has, each head's largest change)."""
    probes, have = result.frame("probes"), result.available()
    found = stages(probes)
    return {
        "stages": found.summary() if found else None,
        "source_share_reading": source_share_reading(result.model_frame()),
        "specialisation": table_rows(specialisation(probes)),
        "largest_change": {
            basis: {m: table_rows(largest_change(result.frame(basis), m)) for m in have[basis]}
            for basis in BASES
            if not result.frame(basis).empty
        },
    }


@dataclass
class MapDifference:
    """B − A of one kind's maps of a probe sentence at two steps, heads by change."""

    diff: np.ndarray  # (L, H, Tq, Tk) B − A on the rows and columns both steps have
    query_tokens: list[str]  # Tq, B's
    key_tokens: list[str]  # Tk, B's
    order: list[tuple[int, int, float]]  # (layer, head, mean |B − A|), the largest first
    note: str = ""  # what was cut to compare, in words ("" when the two maps match in size)


def map_difference(a: SentenceMaps, b: SentenceMaps, kind: str) -> MapDifference:
    """B − A of ``kind``; where the outputs differ in length, the first rows (and decoder
    keys) both have are compared, position by position, and the note says so."""
    if kind not in KINDS:
        raise ValueError(f"unknown attention kind {kind!r}")
    wa, wb = a.weights(kind), b.weights(kind)
    tq, tk = min(wa.shape[2], wb.shape[2]), min(wa.shape[3], wb.shape[3])
    diff = wb[:, :, :tq, :tk].astype(np.float64) - wa[:, :, :tq, :tk]  # (L, H, Tq, Tk)
    queries, keys = b.tokens(kind)
    note = ""
    if wa.shape[2:] != wb.shape[2:]:
        note = (
            f"the outputs differ in length ({wa.shape[2]} and {wb.shape[2]} steps): the first "
            f"{tq} steps are compared position by position"
        )
    elif kind != "encoder" and a.output_tokens != b.output_tokens:
        note = "the outputs differ: rows are compared position by position"
    change = np.abs(diff).mean(axis=(2, 3))  # (L, H)
    order = sorted(
        ((int(i), int(j), float(change[i, j])) for i, j in np.ndindex(change.shape)),
        key=lambda x: -x[2],
    )
    return MapDifference(diff, list(queries[:tq]), list(keys[:tk]), order, note)


def heads_like_the_maps(difference: pd.DataFrame, maps: MapDifference, kind: str) -> pd.DataFrame:
    """One kind's rows of ``step_difference`` in the maps' order (the head whose map moved
    most first, as the grid above shows them), with that map change, in words a reader
    knows: "map change (mean |B − A|)", the metric "at A", "at B" and "B − A"."""
    change = {(layer, head): c for layer, head, c in maps.order}
    rank = {(layer, head): i for i, (layer, head, _) in enumerate(maps.order)}
    rows = difference[difference["kind"] == kind].drop(columns=["kind"])
    keys = list(zip(rows["layer"], rows["head"]))
    rows = rows.assign(**{"map change (mean |B − A|)": [change.get(k) for k in keys]})
    rows = rows.rename(columns={"b_minus_a": "B − A"})
    return rows.iloc[np.argsort([rank.get(k, len(rank)) for k in keys], kind="stable")]
