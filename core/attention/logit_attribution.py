"""Direct logit attribution: each head's, each feed-forward sub-layer's, the embeddings' and
each bias's share of one output step's logit (or logit difference), summing to it.

TransformerLens's ``decompose_resid`` / ``stack_head_results`` / ``logit_attrs``, on every
family through the model's own terms (``core.model.stream_terms``): the stream at the step is
the sum of what each part wrote, carried through each norm after it with the norm's scale
frozen at the pass's value (the final norm of a pre-LN model; every norm of a post-LN one,
its bias a term of its own), then through the output layer, onto the answer's logit minus the
wrong word's. ``accumulated`` is the sum of the terms up to each layer (the stream after each
layer, read through the same frozen norms: its last entry is the logit); ``per_layer`` each
layer's share. An encoder-decoder's encoder reaches the step only through its cross-attention
heads, which are terms like any head. Read by the Attention page's "Direct logit attribution"
section and ``python -m core.logit_attribution``.

Shape key: L layers, H heads per attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.measure.progress import check_time
from core.model.interface import TranslationModel, known_token_id
from core.model.parts import Translation
from core.model.stream_terms import StreamTermsError, stream_terms

KINDS = ("embed", "head", "attention bias", "mlp", "norm bias", "output bias")  # a term's kind
VIEWS = ("terms", "accumulated", "per_layer")  # what the command prints
VIEW_WORDS = {"terms": "every term", "accumulated": "accumulated", "per_layer": "per layer"}


class LogitAttributionError(ValueError):
    """What was asked cannot be attributed (a step or word the translation lacks, a model whose
    output is not affine once its norms are frozen); the message says what to do."""


@dataclass
class LogitAttribution:
    """One step's logit (difference) taken apart."""

    rows: list[dict]  # one per term: kind, layer, head, attention, sublayer, value
    logit: float  # the model's own logit (difference) at the step, from its forward
    total: float  # the terms' sum (equal to ``logit`` within 1e-5)
    answer: str  # the word whose logit is taken apart
    wrong: str | None  # the word subtracted, if any
    step: int  # the output step
    reads: str  # the word the step reads (its decoder input), or the masked position's
    position: int  # where the step sits in the model's pass
    layers: int  # L
    heads: int  # H
    ids: tuple[int, ...] = ()  # the answer's target id (and the wrong word's)

    @property
    def attentions(self) -> list[str]:
        """The attentions with heads, in the model's order: "self" (and "cross")."""
        return list(dict.fromkeys(r["attention"] for r in self.rows if r["kind"] == "head"))

    def head_grid(self, attention: str) -> np.ndarray:
        """(L, H) each head's term of one attention."""
        grid = np.zeros((self.layers, self.heads))
        for r in self.rows:
            if r["kind"] == "head" and r["attention"] == attention:
                grid[r["layer"], r["head"]] = r["value"]
        return grid

    def per_layer(self) -> list[dict]:
        """The terms summed per layer: the embeddings, each layer, then what follows the last
        (the final norm's bias and the output layer's)."""
        return [{"layer": name, "value": value} for name, value in self._groups()]

    def accumulated(self) -> list[dict]:
        """The stream after the embeddings and after each layer (and after the output layer),
        through the frozen norms: running sums of ``per_layer``, the last equal to the logit."""
        total, rows = 0.0, []
        for name, value in self._groups():
            total += value
            rows.append({"layer": name, "value": total})
        return rows

    def _groups(self) -> list[tuple[str | int, float]]:
        sums: dict[str | int, float] = {"embed": 0.0, **{i: 0.0 for i in range(self.layers)}}
        for r in self.rows:
            where = "embed" if r["kind"] == "embed" else r["layer"]
            where = "output" if where is None else where
            sums[where] = sums.get(where, 0.0) + r["value"]
        return list(sums.items())

    def summary(self) -> dict:
        """The JSON-able summary line: what was asked, the model's logit and the terms' sum."""
        return {
            "answer": self.answer,
            "wrong": self.wrong,
            "step": self.step,
            "reads": self.reads,
            "position": self.position,
            "logit": round(self.logit, 6),
            "sum": round(self.total, 6),
        }

    def lines(self, view: str = "terms") -> list[dict]:
        """The command's JSON lines of one view (``VIEWS``), then the summary."""
        if view == "accumulated":
            body = [{"kind": "accumulated", **r} for r in self.accumulated()]
        elif view == "per_layer":
            body = [{"kind": "layer", **r} for r in self.per_layer()]
        else:
            body = [
                {k: v for k, v in r.items() if v is not None or k in ("layer", "head")}
                for r in self.rows
            ]
        rounded = [{**r, "value": round(r["value"], 6)} for r in body]
        return [*rounded, self.summary()]


def word_id(m: TranslationModel, word: str) -> int:
    """The target id of a word as the model's tokens show it; LogitAttributionError when the
    model lacks it (reads it as its unknown token, or its end token where it has none)."""
    if (tid := known_token_id(m, word)) is None:
        raise LogitAttributionError(
            f"The model has no output token {word!r}: give one of its tokens (as the "
            "translation shows them)."
        )
    return tid


def logit_attribution(
    m: TranslationModel,
    t: Translation,
    step: int | None = None,
    answer: str | None = None,
    wrong: str | None = None,
) -> LogitAttribution:
    """Step ``step`` (default: the last) of translation ``t`` taken apart: the logit of
    ``answer`` (default: the word the step wrote), minus ``wrong``'s where given."""
    if why := m.supports("logit_attribution"):
        raise LogitAttributionError(why)
    out = list(t.out_ids)
    if not out:
        raise LogitAttributionError("There is no output step to attribute: translate first.")
    step = len(out) - 1 if step is None else step
    if not 0 <= step < len(out):
        raise LogitAttributionError(f"Step {step}: this output has steps 0..{len(out) - 1}.")
    ids = [word_id(m, answer) if answer else out[step]]
    if wrong:
        ids.append(word_id(m, wrong))
    check_time()  # a shared server's limit for one heavy job
    try:
        st = stream_terms(m, t.src_ids, out, step, ids)
    except StreamTermsError as e:
        raise LogitAttributionError(str(e)) from e
    sign = np.array([1.0, -1.0][: len(ids)])
    values = st.values.cpu().numpy() @ sign  # (n,) each term's share of the difference
    rows = [{**term.labels(), "value": float(v)} for term, v in zip(st.terms, values)]
    words = [answer or t.output_tokens[step], wrong]  # as typed, or as the translation shows it
    reads = list(t.decoder_inputs)[step] if step < len(t.decoder_inputs) else ""
    return LogitAttribution(
        rows,
        float(st.logits.cpu().numpy() @ sign),
        float(values.sum()),
        words[0],
        words[1] if wrong else None,
        step,
        reads,
        st.position,
        st.layers,
        st.heads,
        tuple(ids),
    )
