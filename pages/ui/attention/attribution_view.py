"""Attention page, "Attribution" section: what attention shows beside what the tokens contribute."""

from __future__ import annotations

import streamlit as st

from core.attention.kinds import KIND_NAMES
from core.attention.maps import csv_cell, decoder_view, export_name, select_view
from core.attention.sentence_maps import SentenceMaps
from core.attribution.contrast import CONTRAST_METHODS, CONTRAST_NAMES, foil_at
from core.attribution.explain import SHARE_FLAG, Explained
from core.attribution.explain import shown as shown_explanation
from core.attribution.gradients import (
    CHOICE_WORDS,
    CONTRAST_WORDS,
    DEFAULT_CHOICES,
    GradientChoices,
)
from core.attribution.methods import (
    MEAN,
    METHODS,
    AttributionError,
    method_name,
    method_problem,
)
from core.attribution.spans import parse_spans
from core.attribution.step_scores import SCORES, contrast_source_ids, perplexity_words
from core.figures import attention as figs
from core.figures import attribution as attr_figs
from core.model.interface import known_token_id
from core.model.parts import TranslationError
from pages.ui.attention.faithfulness_view import faithfulness_panel
from pages.ui.attention.gradient_choices import (
    gradient_choices,
    integration_time,
    integration_words,
)
from pages.ui.attention.inputs import SectionInputs
from pages.ui.cached import (
    contrast_explanation,
    explanation,
    scores_of_steps,
    uploaded_results,
)
from pages.ui.charts import chart
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import bounded, widget_default

METHOD_WORDS = {  # method -> what it measures, for the caption beside the picker
    "attention": "the cross-attention weights of the view's layer and head, read as they "
    "are; they ignore the target prefix, the residual stream and what the values carry.",
    "rollout": "Abnar & Zuidema 2020. Encoder self, decoder self and cross attention "
    "multiplied through the layers, the residual counted as half of each step.",
    "norm": "Kobayashi et al. 2020. A token's share is the size of its weighted, transformed "
    "value ‖α f(x)‖, not the weight α alone; rolled out through the layers.",
    "alti": "Ferrando et al. 2022. Each sub-layer's output is split into per-token terms "
    "(residual and layer norm included), scored by distance and rolled out.",
    "value-zeroing": "Mohebbi et al. 2023. How much each token's representation changes when "
    "one token's value vector is zeroed; rolled out through the layers.",
    "grad-input": "the gradient of log p(output token) times the token embeddings; absolute "
    "values, each row normalised to 1.",
    "saliency": "Simonyan et al. 2014 (inseq's saliency). The absolute gradient of log p(output "
    "token) at the token embeddings, reduced over the width (inseq's: L2 norm); no baseline.",
    "deeplift": "Shrikumar et al. 2017, captum's DeepLIFT from the baseline chosen below. Its "
    "rules act on ReLU/Tanh/Softmax modules only: through GELU, layer norms and attention it "
    "is the plain gradient (completeness error shown).",
    "gradient-shap": "Lundberg & Lee 2017, captum's GradientSHAP: gradients at random points "
    "between baselines drawn from the one chosen below and the embeddings (seeded: the same "
    "each time).",
}  # integrated gradients: in words as chosen (gradient_choices.integration_words)
DALE = (
    "**Source share.** Each bar is the part of an output token's contributions that comes "
    "from the source sentence; the rest comes from the translation's prefix it has already "
    "written. Dale et al. (2023) found that translations whose tokens draw little on the "
    "source (measured with ALTI+) are often hallucinations: the decoder goes on from its "
    f"own prefix instead of translating. Bars under {SHARE_FLAG:.1f} are red. A flag is a "
    "hint to look closer, not a verdict: function words and `<eos>` often lean on the prefix."
)


def attribution_section(page: SectionInputs) -> None:
    """The method picker, attention beside contributions, source shares, faithfulness."""
    state = page.state
    method, beside = pick_method(state, page.lm)
    choices = gradient_choices(method, state, page.lm)  # baseline, steps, aggregation...
    words = integration_words(choices) if method == "integrated-gradients" else METHOD_WORDS[method]
    if method == "attention" and (one := page.lm.supports("cross_attention")):
        words = one  # a one-stack model's one attention, in words
    beside.caption(md(f"{method_name(page.lm, method)}: {words}"))
    layer, head = cross_choice(page.maps, state)
    spans = span_inputs(state)
    shown = explained_or_error(page, method, layer, head, choices, spans)
    row = st.container(horizontal=True, gap="medium")  # side by side where both fit
    S, T = len(page.maps.src_tokens), len(page.maps.output_tokens)
    attention_panel(row.container(width=attr_figs.panel_width(S)), page, layer, head)
    if shown is not None:
        right = row.container(width=attr_figs.panel_width(S + T))
        contribution_panel(right, page, shown, (layer, head))
        share_panel(page, shown)
    step_scores_panel(page)
    contrast_panel(page)
    faithfulness_panel(page.entry, page.lm, state, choices)
    results_file_panel()


FILE_HOW = (
    "Explain a whole file with `python -m core.attribute --checkpoint MODEL --input "
    "pairs.tsv --out attributions.jsonl [--method M]` (a line per sentence: source, then "
    "optionally a TAB and a target, a TAB and a contrast; resumable after an interruption), "
    "then load the results here."
)


def results_file_panel() -> None:
    """A results file of ``core.attribute --input`` loaded back and summed up: the mean
    source share by output position, the source tokens that contribute most, one row per
    sentence."""
    with st.expander("Attributions of a whole file"):
        st.caption(FILE_HOW)
        up = st.file_uploader("Results (.jsonl)", type=["jsonl", "json", "txt"], key="atr_file")
        if up is None:
            return
        result = uploaded_results(up.getvalue())
        if isinstance(result, str):
            st.error(md(f"{up.name} cannot be read: {result}"))
            return
        explained = len(result.per_sentence)
        errors = f", {result.errors} lines that could not be explained" if result.errors else ""
        st.markdown(f"**{explained} sentences explained**{errors}.")  # numbers only
        if not explained:
            return
        left, right = st.columns(2)
        left.markdown("**Mean source share by output position**")
        left.dataframe(spreadsheet_safe(result.by_position), hide_index=True)
        right.markdown("**Source tokens by mean contribution received**")
        right.dataframe(spreadsheet_safe(result.by_token.head(50)), hide_index=True)
        st.markdown("**Per sentence**")
        st.dataframe(spreadsheet_safe(result.per_sentence), hide_index=True)


STEP_SCORES_HOW = (
    "From one teacher-forced pass, as inseq's step functions: **probability** of each output "
    "piece and its **rank** among the vocabulary (1 = the model's first choice), its **logit** "
    "(before the softmax) and **crossentropy** (−log p), the "
    "**entropy** of the step's distribution in nats (0 = certain), and the **perplexity** of "
    "the output so far (exp of the mean −log p of steps 0..t). With a contrast source x', "
    "**pcxmi**: log₂ p(y_t | x', y_<t) − log₂ p(y_t | x, y_<t) in bits (P-CXMI as inseq's "
    "`pcxmi` computes it): positive where x' makes the piece more likely than the source "
    "does (x' the sentence with its context: what the context adds). "
    "`python -m core.attribute [--contrast-source …]` prints the same numbers under "
    "`step_scores`."
)
CONTRAST_SCORES_HOW = (
    "**probability difference**: p(written) − p(alternative) at each step, both after the "
    "translation's prefix (what the contrast above explains); **KL**: KL divergence in nats "
    "between the step's distribution after the translation's prefix and after the "
    "alternative's (0 until the two prefixes differ)."
)


def step_scores_panel(page: SectionInputs) -> None:
    """Each output step's probability, rank, logit, cross-entropy, entropy and perplexity so
    far, and P-CXMI against a contrast source typed here, as a table."""
    scores = scores_of_steps(page.lm, page.translation, page.key, None)
    with st.expander(f"Step scores: {md(perplexity_words(scores))}"):
        state = page.state
        widget_default("atr_contrast_source", state.contrast_source)
        other = st.text_input(
            "Contrast source (P-CXMI)", key="atr_contrast_source",
            help="Another source sentence x': each step's log₂ p(y_t | x', y_<t) − "
            "log₂ p(y_t | x, y_<t), as inseq's pcxmi. Leave empty for none.",
        )  # fmt: skip
        state.contrast_source = other = bounded(other, "contrast source").strip()
        if other:
            try:
                ids = tuple(contrast_source_ids(page.lm, other))
                scores = scores_of_steps(page.lm, page.translation, page.key, None, ids)
            except TranslationError as e:
                st.error(md(f"Contrast source: {e}"))
        st.dataframe(spreadsheet_safe(scores.frame()), hide_index=True, column_config=SCORE_COLUMNS)
        st.caption(STEP_SCORES_HOW)


SCORE_COLUMNS = {name: st.column_config.NumberColumn(format="%.4f") for name in SCORES}
CONTRAST_COLUMNS = ("step", "token", "contrast", "probability", "rank", "probability_difference")
CONTRAST_COLUMNS += ("kl",)  # the contrast's table: each step's other scores are in Step scores


def contrast_panel(page: SectionInputs) -> None:
    """Why the written word rather than another at one step: a contrastive attribution
    (Yin & Neubig 2022) of log p(y_t) - log p(y'_t), the alternative one of the step's
    top candidates."""
    st.subheader("Why this word rather than another?")
    st.caption(
        "Explains log p(written word) − log p(alternative) at one step (or the difference of "
        "the two probabilities): a token scores high "
        "when it favours the written word over the alternative. Gradient × input, integrated "
        "gradients and occlusion can contrast; attention, rollout, norm-based, ALTI+ and value "
        "zeroing cannot (they describe how the model mixes its tokens, the same whichever "
        "word is asked about)."
    )
    t = page.translation
    others_at = {  # each step's other candidates: by id (one may be written otherwise or not
        # read back at all, as a byte-level model's pieces of a word)
        i: [w for w, _ in cands if known_token_id(page.lm, w) not in (None, t.out_ids[i])]
        for i, cands in enumerate(t.topk)
    }
    steps = [i for i, others in others_at.items() if others]
    if not steps:
        st.caption("No step has another candidate to contrast with.")
        return
    state, cols = page.state, st.columns(3)
    if state.contrast_step == -1:
        state.granted("contrast_step")  # "the first with another": the first shown
    state.why["contrast_step"] = "not a step with another candidate"
    state.why["contrast_word"] = "not among the step's candidates"
    widget_default(
        "atr_contrast_step",
        state.contrast_step if state.contrast_step in steps else steps[0],
        steps,
    )
    step = cols[0].selectbox(
        "Output step",
        steps,
        format_func=lambda i: f"{i}: {t.output_tokens[i]}",
        key="atr_contrast_step",
    )
    state.contrast_step = step
    others = others_at[step]
    widget_default(
        "atr_contrast_word",
        state.contrast_word if state.contrast_word in others else others[0],
        others,
    )
    word = cols[1].selectbox("Rather than", others, key="atr_contrast_word")
    state.contrast_word = word
    widget_default("atr_contrast_method", state.contrast_method, CONTRAST_METHODS)
    method = cols[2].selectbox(
        "Contrastive method",
        CONTRAST_METHODS,
        format_func=CONTRAST_NAMES.get,
        key="atr_contrast_method",
    )
    state.contrast_method = method
    widget_default("atr_contrast_function", state.contrast_function, tuple(CONTRAST_WORDS))
    state.contrast_function = function = st.radio(
        "Explained", tuple(CONTRAST_WORDS), key="atr_contrast_function", horizontal=True,
        format_func=CONTRAST_WORDS.get,
        help="The difference of log-probabilities (Yin & Neubig's) or of probabilities "
        "(inseq's contrast_prob_diff). The KL divergence to the alternative's distribution "
        "is in the command (`--function kl`): it differs only at the steps after this one.",
    )  # fmt: skip
    try:
        foil = foil_at(page.lm, t, step, word)
        chosen = GradientChoices(function=function)
        e = contrast_explanation(page.lm, t, page.key, tuple(foil), method, chosen)
    except AttributionError as err:
        st.error(md(err))
        return
    title = f"Why “{t.output_tokens[step]}” rather than “{word}” ({CONTRAST_NAMES[method]})"
    name = export_name(state.model, state.sentence, None, None, None, "contrast")
    chart(attr_figs.contrast_figure(e, step, title), "atr_contrast", name=name)
    scores = scores_of_steps(page.lm, t, page.key, tuple(foil)).frame()
    scores = scores[[c for c in CONTRAST_COLUMNS if c in scores]]  # the rest: Step scores
    st.dataframe(spreadsheet_safe(scores), hide_index=True, column_config=SCORE_COLUMNS)
    st.caption(CONTRAST_SCORES_HOW)
    st.download_button(
        "Contrast as CSV",
        explanation_csv(e),
        f"{name}.csv",
        "text/csv",
        help="One row per output token: what each source and prefix token contributes to "
        "log p(written word) − log p(alternative) (the chosen step's row is the one asked).",
        key="atr_contrast_csv",
    )


def explanation_csv(e: Explained) -> bytes:
    """An explanation's rows as CSV (its output tokens safe in a spreadsheet)."""
    table = e.frame()
    table["output"] = table["output"].map(csv_cell)
    return table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")


def pick_method(state: ViewState, lm=None) -> tuple[str, object]:
    """The method picker (widget ``atr_method``), kept in the view state and the URL: the
    methods that explain this model (the others named under it, with why); with the place
    beside it for what the method measures, as chosen below it."""
    usable = [m for m in METHODS if lm is None or method_problem(lm, m) is None] or list(METHODS)
    if state.method not in usable:
        state.drop("method", method_problem(lm, state.method) or "not offered for this model")
        state.method = usable[0]
    widget_default("atr_method", state.method, usable)
    left, right = st.columns([1, 2], vertical_alignment="center")
    state.method = left.selectbox(
        "Attribution method",
        usable,
        key="atr_method",
        format_func=lambda m: method_name(lm, m),
        help="How each output token's log-probability is split over the source tokens and "
        "the translation's prefix the decoder had read. Every method's rows sum to 1.",
    )
    if left_out := [m for m in METHODS if m not in usable]:
        st.caption(md(left_out_words(lm, left_out)))
    return state.method, right.empty()


def left_out_words(lm, left_out: list[str]) -> str:
    """The methods a model is not offered, grouped by their reasons, each reason said once."""
    by_reason: dict[str, list[str]] = {}
    for m in left_out:
        by_reason.setdefault(method_problem(lm, m), []).append(method_name(lm, m))
    said = " ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
    return f"Not offered for this model: {said}"


def cross_choice(maps: SentenceMaps, state: ViewState) -> tuple[int, str]:
    """(layer, head) of cross attention nearest the view: its layer clamped, a head or the mean.

    Says so in a caption when the view shows something else (another kind, max, rollout).
    """
    _, layer, head = decoder_view(maps, "cross", state.layer, state.head)
    head = head if head.isdigit() else MEAN
    if (state.kind, state.layer, state.head) != ("cross", layer, head):
        asked = f"{KIND_NAMES[state.kind]} attention, layer {state.layer}, {head_words(state.head)}"
        st.caption(
            md(
                f"The view is set to {asked}. This section reads cross attention (output "
                f"tokens over source tokens), so it shows layer {layer}, {head_words(head)}."
            )
        )
    return layer, head


def head_words(head: str) -> str:
    """A head choice in words: "head 2", "mean of heads", "max of heads" or "rollout"."""
    if head.isdigit():
        return f"head {head}"
    return head if head == "rollout" else f"{head} of heads"


SPANS_HOW = (
    "Several tokens read as one, as inseq's span aggregation: `a:b` is tokens a to b−1 "
    "(0-based, as numbered in the CSV), several separated by commas, e.g. `0:2,3:5`. A span's "
    "column is the sum of its columns, its row the mean of its rows (rows still sum to 1). "
    "`python -m core.attribute --source-spans … --target-spans …` prints the same."
)


def span_inputs(state: ViewState) -> tuple[str, str]:
    """(source spans, output spans) as typed (widgets ``atr_source_spans``,
    ``atr_target_spans``; "" for none), kept in the view state."""
    widget_default("atr_source_spans", state.source_spans)
    widget_default("atr_target_spans", state.target_spans)
    with st.expander("Spans: several tokens read as one"):
        cols = st.columns(2)
        source = cols[0].text_input("Source spans", key="atr_source_spans")  # no max_chars:
        output = cols[1].text_input("Output spans", key="atr_target_spans")  # bounded says
        st.caption(SPANS_HOW)
    state.source_spans = bounded(source, "source spans").strip()
    state.target_spans = bounded(output, "output spans").strip()
    return state.source_spans, state.target_spans


def explained_or_error(
    page: SectionInputs,
    method: str,
    layer: int,
    head: str,
    choices=DEFAULT_CHOICES,
    spans: tuple[str, str] = ("", ""),
) -> tuple[Explained, Explained, object] | None:
    """(over the model's own tokens, as shown, the prefix cells each shown row can read): the
    cached attribution, in words or ``spans`` as asked; None after st.error."""
    state, key = page.state, page.key
    where = (layer, head) if method == "attention" else (None, MEAN)
    slow = f" ({integration_time(choices)})" if method == "integrated-gradients" else ""
    if problem := method_problem(page.lm, method):
        st.info(md(problem))
        return None
    try:
        with st.spinner(f"Computing {method_name(page.lm, method)}{slow}…"):
            pieces = explanation(page.lm, page.translation, key, method, *where, choices)
    except AttributionError as e:
        st.error(md(f"{method_name(page.lm, method)} cannot explain this translation: {e}"))
        return None
    try:
        e = shown_explanation(pieces, state.words, spans)
        output = parse_spans(spans[1], len(pieces.output), "output")
    except AttributionError as err:
        st.error(md(f"Spans: {err}"))
        return None
    return pieces, e, attr_figs.visible_prefix(pieces, state.words, output)


def attention_panel(col, page: SectionInputs, layer: int, head: str) -> None:
    """Left: the cross-attention map of the chosen layer and head."""
    state = page.state
    col.markdown("**What attention shows**")
    view = select_view(page.maps, "cross", layer, head, state.hide)
    name = export_name(state.model, state.sentence, "cross", layer, head, "attribution")
    chart(figs.view_figure(view, page.stretch), "atr_attention", col, name)


def contribution_panel(
    col, page: SectionInputs, shown: tuple[Explained, Explained, object], where: tuple[int, str]
) -> None:
    """Right: output tokens × [source | prefix] of the method, with its CSV."""
    _, e, visible = shown
    state, a = page.state, e.attribution
    col.markdown("**What the tokens contribute**")
    title, notes = method_name(page.lm, a.method), []
    if a.method == "attention":
        title += f" — layer {where[0]}, {head_words(where[1])}"
        if not page.lm.supports("cross_attention"):  # else its one attention reads the prefix
            notes.append("attention reads the source only: the prefix block is 0")
    elif a.raw is not None:
        chosen = a.extra.get("choices", DEFAULT_CHOICES)
        notes.append(CHOICE_WORDS[chosen.normalisation].replace("each row scaled", "rows scaled"))
    if a.completeness is not None:
        notes.append(f"completeness error {a.completeness:.1%}")
    fig = attr_figs.contribution_figure(e, title, visible, page.stretch, notes)
    name = export_name(state.model, state.sentence, what=a.method)
    chart(fig, "atr_matrix", col, name)
    col.download_button(
        "Contributions as CSV",
        explanation_csv(e),
        f"{name}.csv",
        "text/csv",
        help="One row per output token: its source share, then a column per source token "
        "and per prefix token (later prefix tokens are 0).",
    )


def share_panel(page: SectionInputs, shown: tuple[Explained, Explained, object]) -> None:
    """The source share of every output token, flagged under SHARE_FLAG, and what it means."""
    e, state = shown[1], page.state
    method = e.attribution.method
    title = f"How much each output token takes from the source ({method_name(page.lm, method)})"
    name = export_name(state.model, state.sentence, what=f"{method} source share")
    chart(attr_figs.source_share_figure(e, title), "atr_share", name=name)
    if method == "attention" and not page.lm.supports("cross_attention"):
        st.caption("Raw attention has no prefix part, so every share is 1: pick another method.")
    st.caption(DALE)
