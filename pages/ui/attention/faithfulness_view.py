"""Attribution section, faithfulness: which method agrees with removing the words it ranks."""

from __future__ import annotations

import streamlit as st

from core.attention.maps import export_name
from core.attribution.faithfulness import (
    DEFAULT_METHODS,
    RANDOM,
    SAMPLE_SIZES,
    Faithfulness,
    faithfulness_for,
    lookup_faithfulness,
    usable_methods,
)
from core.attribution.gradients import DEFAULT_CHOICES
from core.attribution.methods import METHOD_NAMES, METHODS, AttributionError
from core.corpus.source import DataError
from core.figures import attribution as attr_figs
from core.model.interface import TranslationModel
from core.model.own_outputs import outputs_words
from core.runs.catalogue import ModelEntry
from pages.ui.attention.no_corpus import corpus_missing, no_corpus
from pages.ui.charts import chart
from pages.ui.heavy_work import TimeLimit, heavy_slot
from pages.ui.progress import progress_bar
from pages.ui.text import md, spreadsheet_safe
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default

SLOW_METHOD = "integrated-gradients"  # left out by default: about 2 s per sentence
SLOW_SECONDS = 2.0  # its time per sentence of about 15 tokens
NO_FAITHFULNESS = "Faithfulness cannot be measured for this model here"
HOW = (
    "{outputs}; then every source word is replaced by the unknown token in turn and the "
    "change in log p of each output token is recorded (occlusion). **Spearman ρ**: how well "
    "a method's ranking of the source words agrees with that, per output token, averaged "
    "over sentences (95% interval over sentences). **Drop at k**: the mean fall in log p of "
    "an output token when the method's top-k words for it are removed together; bigger means "
    "the method found the words the output depends on."
)


def faithfulness_panel(
    entry: ModelEntry, lm: TranslationModel, state: ViewState, choices=DEFAULT_CHOICES
) -> None:
    """The methods ranked against occlusion: from the disk cache, or measured on request;
    with gradient ``choices`` other than the defaults, the gradient methods as chosen too."""
    st.subheader("Faithfulness: which method agrees with occlusion?")
    if problem := lm.supports("faithfulness"):  # a model a capability row refuses
        st.caption(md(problem))
        return
    st.caption(HOW.format(outputs=outputs_words(lm)))
    if (missing := corpus_missing(lm.meta)) is not None:  # before controls that cannot work
        no_corpus(NO_FAITHFULNESS, missing)
        return
    if lm.supports("own_split"):  # its sample: fra-eng as the studio splits it by default
        left_out = [METHOD_NAMES[m] for m in METHODS if m not in usable_methods(lm, METHODS)]
        st.caption(
            "This model was not trained here: its sample is the first validation sentences "
            "of fra-eng as the studio splits it by default, given to the model as text, and "
            "each word occluded is each of its pieces replaced by the tokenizer's unknown "
            "token."
            + (
                " Not measured for this model (the method picker above says why): "
                + ", ".join(left_out)
                + "."
                if left_out
                else ""
            )
        )
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="large")
    state.keep_within("faith_sentences", 10, SAMPLE_SIZES[1])
    widget_default("atr_sentences", state.faith_sentences)
    state.faith_sentences = n = int(
        row.number_input(
            "Validation sentences",
            min_value=10,
            max_value=SAMPLE_SIZES[1],
            step=50,
            key="atr_sentences",
            help="The first N sentences of the model's validation split (fra-eng's, for a "
            "model not trained here).",
            width=220,
        )
    )
    widget_default("atr_slow", state.faith_slow)
    state.faith_slow = row.toggle(
        "Include integrated gradients and GradientSHAP",
        key="atr_slow",
        help=f"About {SLOW_SECONDS:.0f} s more per sentence. Tables with and without it are "
        "kept apart on disk.",
    )
    methods = METHODS if state.faith_slow else DEFAULT_METHODS
    target = state.target_lang or None
    if choices != DEFAULT_CHOICES:
        st.caption(
            md(
                "The gradient methods are measured as by default and, on "
                f"rows of their own, as chosen above ({choices.words('integrated-gradients')}): "
                "which choice is most faithful for this model."
            )
        )
    result = lookup_faithfulness(entry.path, lm, n, methods, target, choices)
    if result is None:
        result = measure_on_request(entry, lm, n, methods, target, choices)
    if result is not None:
        show_faithfulness(result, n, state)


def measure_on_request(
    entry, lm, n: int, methods, target_lang=None, choices=DEFAULT_CHOICES
) -> Faithfulness | None:
    """The button that measures faithfulness (with a warning for the slow method), or None."""
    st.caption("The result is kept on disk for this model and number of sentences.")
    if SLOW_METHOD in usable_methods(lm, methods):
        st.warning(
            f"Integrated gradients are slow: about {SLOW_SECONDS:.0f} s per sentence, so "
            f"roughly {duration_words(n * SLOW_SECONDS)} more for {n} sentences."
        )
    if not st.button(f"Measure faithfulness on {n} validation sentences", key="atr_measure"):
        return None
    return measure(entry, lm, n, methods, target_lang, choices)


def duration_words(seconds: float) -> str:
    """A duration for people: "40 s", "7 minutes"."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} minutes"


def measure(
    entry: ModelEntry,
    lm: TranslationModel,
    n: int,
    methods,
    target_lang=None,
    choices=DEFAULT_CHOICES,
) -> Faithfulness | None:
    """Run faithfulness_for with a progress bar and ETA; None, with a message, if it cannot."""
    bar, report = progress_bar()
    with heavy_slot() as slot:
        if slot is None:
            bar.empty()
            return None
        try:
            result = faithfulness_for(
                lm,
                entry.path,
                n,
                methods,
                progress=report,
                target_lang=target_lang,
                choices=choices,
            )
        except DataError as e:  # e.g. a model trained without a validation split
            bar.empty()
            st.error(md(f"Faithfulness cannot be measured for this model: {e}"))
            return None
        except (AttributionError, OSError, ValueError, TypeError, TimeLimit) as e:
            bar.empty()
            st.error(md(f"Faithfulness cannot be measured: {e}"))
            return None
    bar.empty()
    return result


def baseline_words(result: Faithfulness) -> str:
    """The random ranking's row in words: what a method has to beat."""
    r = result.row(RANDOM)
    rho = "n/a" if r["spearman"] is None else f"{r['spearman']:+.2f}"
    drops = ", ".join("n/a" if d is None else f"{d:.2f}" for d in r["deletion"])
    return (
        f"Baseline: a random ranking of the source words scores ρ = {rho} (0 expected) and "
        f"drops log p by {drops} at k = 1, 2, 3. A method is informative only where it "
        "beats these numbers."
    )


def show_faithfulness(result: Faithfulness, n: int, state: ViewState) -> None:
    """The ranked table, the random baseline in words, the deletion curves and the CSV."""
    how = "read from the disk cache" if result.cached else f"measured in {result.seconds:.3g} s"
    only = " (all the validation split holds)" if result.sentences + result.skipped < n else ""
    skipped = f" ({result.skipped} more skipped: no word to hide)" if result.skipped else ""
    st.markdown(
        f"Methods ranked by agreement with occlusion on {result.sentences} validation "
        f"sentences{only}{skipped}, {result.tokens} output tokens; {how}."
    )
    table = attr_figs.faithfulness_table(result)
    number = st.column_config.NumberColumn(format="%.3f")
    st.dataframe(
        spreadsheet_safe(table),
        hide_index=True,
        column_config={c: number for c in table.columns if c not in ("method", "sentences")},
    )
    st.caption(baseline_words(result))
    name = export_name(state.model, "", what=f"faithfulness {result.sentences}")
    chart(attr_figs.deletion_figure(result), "atr_deletion", name=name)
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button("Faithfulness table as CSV", csv, f"{name}.csv", "text/csv")
