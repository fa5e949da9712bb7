"""Attention page, "Attribution" section: the gradient methods' choices (baseline, steps,
rule, aggregation, what is explained), kept in the view state and the URL."""

from __future__ import annotations

import streamlit as st

from core.attribution.gradients import (
    AGGREGATIONS,
    CHOICE_WORDS,
    DEFAULT_CHOICES,
    IG_STEPS,
    MAX_SAMPLES,
    MAX_STEPS,
    NORMALISATIONS,
    PLAIN_FUNCTIONS,
    RANDOM_BASELINES,
    RULES,
    GradientChoices,
    baselines_of,
)
from core.attribution.methods import GRADIENT_METHODS
from core.model.interface import TranslationModel
from pages.ui.text import md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default

IG_SECONDS = 0.5  # integrated gradients of a 15-token sentence at IG_STEPS points, one draw
FROM_BASELINE = ("integrated-gradients", "deeplift", "gradient-shap")  # read a baseline
NORMALISATION_WORDS = {"row": "each row sums to 1", "none": "none (signed scores)"}


def integration_words(chosen: GradientChoices) -> str:
    """What integrated gradients computes as chosen, and about how long it takes."""
    drawn = f", averaged over {chosen.samples} draws" if chosen.baseline in RANDOM_BASELINES else ""
    return (
        f"Sundararajan et al. 2017. Gradients integrated from {CHOICE_WORDS[chosen.baseline]} "
        f"in {chosen.steps} steps ({CHOICE_WORDS[chosen.rule]}){drawn}; "
        f"{integration_time(chosen)}."
    )


def integration_time(chosen: GradientChoices) -> str:
    """About how long integrated gradients takes as chosen, in words."""
    seconds = IG_SECONDS * chosen.integrations() / IG_STEPS
    return f"about {seconds:.1f} s for a 15-token sentence"


def gradient_choices(method: str, state: ViewState, lm: TranslationModel) -> GradientChoices:
    """The gradient methods' choices (widgets ``atr_*``, in an expander), kept in the view
    state: what is explained, the aggregation and normalisation, and for integrated
    gradients the baseline, steps, rule, specials and random draws."""
    if method not in GRADIENT_METHODS:
        return DEFAULT_CHOICES
    with st.expander("Choices: baseline, steps, aggregation, what is explained"):
        cols = st.columns(3)
        state.function = _pick(
            cols[0], "Explained", PLAIN_FUNCTIONS, "atr_function", state.function,
            help="log p(y_t), as the studio always did; p(y_t), inseq's default; or the "
            "entropy of the step's distribution (what makes the model unsure). The KL "
            "divergence needs an alternative: see “Why this word rather than another?”.",
        )  # fmt: skip
        state.aggregation = _pick(
            cols[1], "Over the embedding", AGGREGATIONS, "atr_aggregation", state.aggregation,
            help="A token's score from its D per-dimension scores: their signed sum (the "
            "default), their L2 norm (inseq's) or the sum of their absolute values.",
        )  # fmt: skip
        state.normalisation = _pick(
            cols[2], "Normalisation", NORMALISATIONS, "atr_normalisation", state.normalisation,
            words=NORMALISATION_WORDS,
            help="Each row's absolute scores scaled to sum to 1 (the default, comparable "
            "across methods), or the scores as aggregated, signs kept (drawn red/blue).",
        )  # fmt: skip
        chosen = GradientChoices(  # the integration's own choices only where it integrates
            aggregation=state.aggregation,
            function=state.function,
            normalisation=state.normalisation,
        )
        if method in FROM_BASELINE:  # integrated gradients, DeepLIFT, GradientSHAP
            integration_choices(state, lm)
            chosen = state.gradient_choices()
        if chosen != DEFAULT_CHOICES:
            st.caption(md(f"Computed with: {chosen.words(method)}."))
        return chosen


def integration_choices(state: ViewState, lm: TranslationModel) -> None:
    """Integrated gradients' own choices (widgets ``atr_*``), into the view state: the
    baselines this model has, steps, rule, specials kept, random draws."""
    offered = baselines_of(lm)
    if state.baseline not in offered:
        state.drop("baseline", f"this model's tokenizer has no {state.baseline.upper()} token")
    more = st.columns(3)
    state.baseline = _pick(
        more[0], "Baseline", offered, "atr_baseline", state.baseline,
        help="Where the integral starts: zero embeddings (the default); a special token's "
        "embedding at every position, of those this model's tokenizer has (inseq's baseline "
        "is UNK); uniformly random embeddings, or random vocabulary tokens' (expected "
        "gradients), averaged.",
    )  # fmt: skip
    state.ig_steps = _count(
        more[1], "Steps", "atr_steps", (2, MAX_STEPS), state, "ig_steps",
        help="Integration points (integrated gradients) or samples (GradientSHAP, captum's "
        "n_samples): more is closer to the integral and slower. DeepLIFT takes none.",
    )  # fmt: skip
    state.rule = _pick(
        more[2], "Rule", RULES, "atr_rule", state.rule,
        help="How the integral is approximated (captum's rules; integrated gradients only).",
    )  # fmt: skip
    last = st.columns(3)
    widget_default("atr_keep_specials", state.keep_specials)
    state.keep_specials = last[0].checkbox(
        "Specials keep their embedding", key="atr_keep_specials",
        disabled=state.baseline == "zero",
        help="As inseq does: </s> and the start token stay as they are in the baseline.",
    )  # fmt: skip
    state.samples = _count(
        last[1], "Random draws", "atr_samples", (1, MAX_SAMPLES), state, "samples",
        disabled=state.baseline not in RANDOM_BASELINES,
        help="How many random baselines are averaged (each costs one integration; steps × "
        "draws at most 1,024).",
    )  # fmt: skip


def _pick(where, label: str, options, key: str, value: str, words=CHOICE_WORDS, **kw) -> str:
    """A selectbox over ``options`` named in ``words``, seeded with ``value``."""
    widget_default(key, value, options)
    return where.selectbox(label, options, key=key, format_func=words.get, **kw)


def _count(where, label: str, key: str, bounds: tuple[int, int], state, name: str, **kw) -> int:
    """A whole number within ``bounds`` (field ``name`` of the state); one typed outside is
    said in words and the nearer bound used (a box's own limits show only a red mark)."""
    least, most = bounds
    widget_default(key, getattr(state, name))
    typed = int(where.number_input(f"{label} ({least} to {most})", step=1, key=key, **kw))
    if not least <= typed <= most:
        used = min(max(typed, least), most)
        where.warning(f"{label}: from {least} to {most}; {typed:,} asked, {used} used.")
        return used
    return typed
