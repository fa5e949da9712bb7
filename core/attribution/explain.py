"""A translation explained: one method's contributions with the tokens of each axis.

``explain`` runs a method on the sentence exactly as the decoder produced it (the ids of a
``Translation``); ``in_words`` merges a BPE model's pieces back into words the way
``core.attention.word_maps`` merges attention: a word's row is the mean of its pieces' rows,
a word's column the sum of its pieces' columns (rows still sum to 1).

Shape key: S source tokens, T output tokens; S', T' after merging into words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from core.attention.word_maps import merge_weights
from core.attribution.contrast import CONTRAST_NAMES, contrast, foil_ids
from core.attribution.gradients import (
    BASELINES,
    CONTRAST_ONLY,
    DEFAULT_CHOICES,
    RANDOM_BASELINES,
    GradientChoices,
    choices_from,
)
from core.attribution.methods import (
    GRADIENT_METHODS,
    MEAN,
    Attribution,
    AttributionError,
    attribute,
    method_name,
)
from core.attribution.spans import in_spans, parse_spans
from core.attribution.step_scores import contrast_source_ids, step_scores
from core.corpus.bpe import PREFIX, join_pieces, word_spans
from core.model.interface import TranslationModel
from core.model.parts import Translation

SHARE_FLAG = 0.5  # an output token taking less than this from the source is flagged


@dataclass
class Explained:
    """One method's contributions for one translation, with the tokens of its axes."""

    attribution: Attribution
    source: list[str]  # S source tokens (<eos> included)
    prefix: list[str]  # T decoder inputs: <bos> + output[:-1]
    output: list[str]  # T output tokens
    probabilities: list[float] | None = None  # of each output token, for a forced target
    ranks: list[int] | None = None  # each output token's rank at its step (1 = the top)
    contrast: list[str] | None = None  # the foil's T tokens of a contrastive explanation
    name: str = ""  # the method's name for this model (``methods.method_name``)

    @property
    def contributions(self) -> np.ndarray:
        """(T, S + T) rows over [source ; prefix], non-negative, each summing to 1 (a
        gradient method's scores as aggregated where the normalisation chosen is none)."""
        return self.attribution.contributions

    @property
    def source_share(self) -> np.ndarray:
        """(T,) the part of each output token's contributions that comes from the source."""
        return self.attribution.source_share

    def flagged(self) -> list[bool]:
        """Output tokens drawn mostly from the target prefix (Dale et al. 2023's signal)."""
        return [bool(s < SHARE_FLAG) for s in self.source_share]

    def to_json(self) -> dict:
        """The command's JSON object (plain lists and numbers)."""
        a = self.attribution
        out = {
            "method": a.method,
            "source": self.source,
            "prefix": self.prefix,
            "output": self.output,
            "contributions": np.round(self.contributions.astype(float), 6).tolist(),
            "source_share": np.round(self.source_share.astype(float), 6).tolist(),
        }
        if a.raw is not None:
            out["raw"] = np.round(a.raw.astype(float), 6).tolist()
        if a.method == "attention":
            out |= {"layer": a.layer, "head": a.head}
        if a.completeness is not None:
            out["completeness_error"] = round(a.completeness, 6)
        if (chosen := a.extra.get("choices")) is not None:  # named where not the defaults
            words = chosen.words(a.method, contrast=self.contrast is not None)
            out |= {"choices": chosen.to_json(), "choices_words": words}
        if self.contrast is not None:  # log p(y_t) - log p(y'_t) explained (by default)
            out |= {"contrast": self.contrast, "contrast_steps": a.extra["contrast_steps"]}
        if self.probabilities is not None:  # a target the user gave
            out |= {"target": True, "probability": [round(p, 6) for p in self.probabilities]}
            out["rank"] = self.ranks
        return out | {"seconds": round(a.seconds, 4)}

    def frame(self) -> pd.DataFrame:
        """One row per output token: its source share, then a column per source/prefix token."""
        columns = [f"source {i}: {w}" for i, w in enumerate(self.source)]
        columns += [f"prefix {i}: {w}" for i, w in enumerate(self.prefix)]
        table = pd.DataFrame(self.contributions, columns=columns)
        table.insert(0, "source share", self.source_share)
        table.insert(0, "output", self.output)
        return table


def explain(
    m: TranslationModel,
    t: Translation,
    method: str,
    layer: int | None = None,
    head: str = MEAN,
    choices: GradientChoices = DEFAULT_CHOICES,
    given: Attribution | None = None,
) -> Explained:
    """Run ``method`` on a translation (its own ids: what the decoder produced); ``choices``:
    the gradient methods' baseline, steps, aggregation and function; ``given``: its
    attribution already computed (the file mode's batches)."""
    if not t.out_ids or not t.src_ids:
        raise AttributionError("nothing to explain: the translation is empty")
    a = given or attribute(m, t.src_ids, t.out_ids, method, layer, head, choices=choices)
    e = Explained(a, list(t.src_tokens), list(t.decoder_inputs), list(t.output_tokens))
    e.name = method_name(m, method)
    if t.forced:
        e.probabilities, e.ranks = list(t.token_probs), list(t.ranks)
    return e


def explain_contrast(
    m: TranslationModel,
    t: Translation,
    foil: str | Sequence[int],
    method: str,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Explained:
    """Run a contrastive ``method`` on a translation: why each y_t rather than the foil's y'_t
    (``core.attribution.contrast``); ``foil`` as text, or as ids (``foil_at``); ``choices``:
    the function contrasted and the gradient methods' baseline, steps and aggregation."""
    if not t.out_ids or not t.src_ids:
        raise AttributionError("nothing to explain: the translation is empty")
    ids = foil_ids(m, t, foil) if isinstance(foil, str) else list(foil)
    a = contrast(m, t, ids, method, choices)
    e = Explained(a, list(t.src_tokens), list(t.decoder_inputs), list(t.output_tokens))
    e.name = CONTRAST_NAMES[method]  # occlusion too; never an attention method
    e.contrast = m.target_tokens(ids)
    if t.forced:
        e.probabilities, e.ranks = list(t.token_probs), list(t.ranks)
    return e


def _merge(block: np.ndarray | None, rows: list[str], cols: list[str]):
    """A (T, N) block of rows over the ``cols`` tokens, merged into words (None stays)."""
    return None if block is None else merge_weights(block, rows, cols)


def in_words(e: Explained) -> Explained:
    """The explanation with a BPE model's pieces merged into words (unchanged without)."""
    tokens = (*e.source, *e.output)
    if not any(t.startswith(PREFIX) and len(t) > len(PREFIX) for t in tokens):
        return e
    a, S = e.attribution, e.attribution.source_length
    parts = []
    for matrix in (a.contributions, a.raw):
        if matrix is None:
            parts.append(None)
            continue
        src = _merge(matrix[:, :S], e.output, e.source)  # (T', S')
        pre = _merge(matrix[:, S:], e.output, e.prefix)  # (T', T')
        parts.append(np.concatenate([src, pre], axis=1))
    source = join_pieces(e.source)
    merged = replace(a, contributions=parts[0], raw=parts[1], source_length=len(source))
    out = Explained(merged, source, join_pieces(e.prefix), join_pieces(e.output))
    out.contrast = None if e.contrast is None else join_pieces(e.contrast)
    out.name = e.name
    if e.probabilities is not None:  # a word: the product of its pieces', its worst rank
        spans = word_spans(e.output)
        out.probabilities = [float(np.prod(e.probabilities[a:b])) for a, b in spans]
        out.ranks = [max(e.ranks[a:b]) for a, b in spans]
    return out


def sentence_json(
    m: TranslationModel,
    t: Translation,
    method: str,
    layer: int | None = None,
    head: str = MEAN,
    contrast: tuple[str, str] | str = "",
    words: bool = False,
    choices: GradientChoices = DEFAULT_CHOICES,
    contrast_source: str = "",
    spans: tuple[str, str] = ("", ""),
    given: Attribution | None = None,
    logits=None,
) -> dict:
    """What ``python -m core.attribute`` prints for one sentence: the explanation (a contrast
    with ``contrast_text``; merged into words, or the (source, output) ``spans`` each read as
    one token, if asked) and its step scores, per piece, as the page's table shows them
    (P-CXMI against ``contrast_source`` where given; ``given``: the attribution of a
    translation without a contrast, already computed; ``logits``: its (T, V) teacher-forced
    logits, already read: ``step_scores.batched_logits``)."""
    text, alignment = (contrast, "") if isinstance(contrast, str) else contrast
    foil = None
    if text.strip():
        foil = foil_ids(m, t, text, alignment or None)
        e = explain_contrast(m, t, foil, method, choices)
    else:
        e = explain(m, t, method, layer, head, choices, given)
    out = shown(e, words, spans).to_json()
    other = contrast_source_ids(m, contrast_source) if contrast_source.strip() else None
    out["step_scores"] = step_scores(m, t, foil, other, logits).to_json()
    return out


def shown(e: Explained, words: bool = False, spans: tuple[str, str] = ("", "")) -> Explained:
    """The explanation as asked: merged into words, or with the (source, output) ``spans``
    (``core.attribution.spans``: "0:2,3:5") each read as one token, or as it is."""
    if not any(s.strip() for s in spans):
        return in_words(e) if words else e
    if words:
        raise AttributionError("Spans name pieces: merge into words or give spans, not both.")
    source = parse_spans(spans[0], len(e.source), "source")
    output = parse_spans(spans[1], len(e.output), "output")
    return in_spans(e, source, output)


def add_sentence_flags(parser) -> None:
    """The command's flags of ``sentence_json``'s spans and contrast source (argparse)."""
    parser.add_argument("--source-spans", default="", help="source tokens read as one: 0:2,3:5")
    parser.add_argument("--target-spans", default="", help="output tokens read as one: 1:3")
    parser.add_argument(  # None: not given ("" given is refused, not read as not given)
        "--contrast-source", default=None, help="P-CXMI: another source sentence (step scores)"
    )


def sentence_flag_problem(args) -> str | None:
    """Why the spans or the contrast source cannot go with the other flags, in one line
    (None: they can): they name one sentence's tokens, and a file gives its own sources."""
    if args.contrast_source is not None and not args.contrast_source.strip():
        return "--contrast-source is blank: give another source sentence, or leave it out"
    spans = bool(args.source_spans.strip() or args.target_spans.strip())
    other = bool((args.contrast_source or "").strip())
    if (spans or other) and args.faithfulness:
        return "spans and --contrast-source explain one sentence: leave out --faithfulness"
    if spans and args.input:
        return "spans name one sentence's tokens: leave out --source-spans/--target-spans"
    if other and args.input:
        return "--input takes a contrast source per line (its fourth column): leave it out"
    given = [f for f, v in (("--target", args.target), ("--contrast", args.contrast)) if v.strip()]
    if given and args.input:  # each line gives its own: the flag would be ignored
        return f"--input takes a target and a contrast per line: leave out {'/'.join(given)}"
    return None


FROM_BASELINE = ("integrated-gradients", "deeplift", "gradient-shap")
CHOICE_READERS = {  # the methods that read each gradient choice (occlusion: only contrasts)
    "function": (*GRADIENT_METHODS, "occlusion"),
    "normalisation": (*GRADIENT_METHODS, "occlusion"),
    "aggregation": GRADIENT_METHODS,
    "baseline": FROM_BASELINE,
    "keep_specials": FROM_BASELINE,
    "samples": FROM_BASELINE,
    "steps": ("integrated-gradients", "gradient-shap"),  # GradientSHAP's: its samples
    "rule": ("integrated-gradients",),
}
BASELINE_READERS = {  # the baselines that read a choice (the others: every baseline)
    "samples": RANDOM_BASELINES,
    "keep_specials": tuple(b for b in BASELINES if b != "zero"),  # zero has no specials
}


def flag_methods(args, every: Sequence[str]) -> list[str]:
    """The methods the command's flags run: --method's; by default ``every`` with
    --faithfulness, else grad-input with --contrast and alti without."""
    if args.method:
        return list(args.method)
    if args.faithfulness:
        return list(every)
    return ["grad-input" if args.contrast.strip() else "alti"]


def choice_flag_problem(args, methods: Sequence[str]) -> str | None:
    """Why the gradient choices of parsed flags (``add_choice_flags``) cannot be used, in one
    line (None: they can): kl without a contrast (an --input file gives its own), or a
    choice changed from its default that none of ``methods`` reads (a default never is)."""
    chosen = choices_from(args)
    if chosen.function in CONTRAST_ONLY and not args.contrast.strip() and not args.input:
        if args.faithfulness:  # which takes no contrast
            return f"--function {chosen.function} compares two translations: leave it out"
        return f"--function {chosen.function} needs an alternative translation: give --contrast"
    for name, readers in CHOICE_READERS.items():
        if getattr(chosen, name) == getattr(DEFAULT_CHOICES, name):
            continue
        flag = "--" + name.replace("_", "-")
        if not set(methods) & set(readers):
            used = ", ".join(methods)
            return f"{flag} changes only {', '.join(readers)}: leave it out with {used}"
        baselines = BASELINE_READERS.get(name, BASELINES)
        if chosen.baseline not in baselines:
            return (
                f"{flag} changes only the baselines {', '.join(baselines)}: choose one (--baseline)"
            )
    return None


def flags_problem(args, every: Sequence[str]) -> str | None:
    """Why the command's sentence flags or gradient choices cannot be used, in one line
    (None: they can); ``every``: the methods --faithfulness runs by default."""
    return sentence_flag_problem(args) or choice_flag_problem(args, flag_methods(args, every))
