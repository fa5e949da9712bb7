"""Attention page, "Remove heads" section: translate with heads removed; head importance."""

from __future__ import annotations

import streamlit as st

from core.attention.ablation import (
    HeadSpec,
    HeadSpecError,
    all_heads,
    heads_of,
    removed_rows,
    spec_text,
)
from core.attention.head_measures import resolved_precision
from core.attention.importance import (
    BY_LOSS,
    SAMPLE_SIZES,
    HeadImportance,
    importance_for,
    lookup_importance,
    measure_of,
    model_facts,
)
from core.attention.maps import export_name, select_view
from core.attention.task_sequence import SequenceScore, sequence_score
from core.command_line import decode_flag_words, shell_word
from core.corpus.source import DataError
from core.figures import attention as figs
from core.figures import importance as abfigs
from core.model.interface import TranslationModel
from core.model.parts import GREEDY, Translation, TranslationError
from core.runs.catalogue import ModelEntry
from pages.ui.attention.cached_ablation import ablated_translate
from pages.ui.attention.inputs import SectionInputs
from pages.ui.attention.no_corpus import corpus_missing, no_corpus
from pages.ui.cached import sentence_maps
from pages.ui.charts import chart
from pages.ui.heavy_work import TimeLimit, heavy_slot
from pages.ui.progress import progress_bar
from pages.ui.text import code, md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default

HEADS_KEY = "ab_heads"  # the multiselect of heads to remove
NO_IMPORTANCE = "Head importance cannot be computed for this model here"


def ablation_section(page: SectionInputs) -> None:
    """Pick heads to remove; the translation and maps without them; head importance."""
    entry, lm, state = page.entry, page.lm, page.state
    heads = pick_heads(lm, state)
    sequence = lm.supports("sentence")  # it reads a token sequence: forced, never decoded
    if not heads:
        again = "the sequence is read again" if sequence else "the sentence is translated again"
        st.caption(
            "Pick heads to remove: their output is zeroed before the output projection W_o "
            f"and {again}. Their maps are still computed and shown."
        )
    elif sequence:
        sequence_removed_view(page, heads)
    else:
        if page.translation.forced:
            st.caption(
                "Beside your translation (fed to the decoder), the model's own translation "
                "with these heads removed, decoded freely."
            )
        removed_view(page, heads)
    importance_panel(entry, lm, state)


def pick_heads(lm: TranslationModel, state: ViewState) -> list[HeadSpec]:
    """The heads-to-remove picker, seeded from the URL; keeps the state's spec in step."""
    every = {h.label: h for h in all_heads(lm.cfg, lm.head_kinds)}
    try:
        wanted = heads_of(state.ablate, lm.cfg, lm.head_kinds)
    except HeadSpecError as e:
        if "ablate" in state.asked:  # a link's: said in its note
            state.why["ablate"] = str(e)
        else:
            st.warning(md(f"The heads to remove were ignored: {e}"))
        wanted = []
    else:
        state.granted("ablate")  # as the link wrote them, or in another order
    if HEADS_KEY in st.session_state:  # labels of another model's heads are dropped
        st.session_state[HEADS_KEY] = [x for x in st.session_state[HEADS_KEY] if x in every]
    widget_default(HEADS_KEY, [h.label for h in wanted])
    chosen = st.multiselect(
        "Heads to remove",
        list(every),
        key=HEADS_KEY,
        placeholder=f"Choose heads, e.g. {list(every)[-1]}",
        help="L: layer, H: head, both counted from 0."
        + (
            " Encoder self, decoder self and cross attention heads can be mixed."
            if len(lm.head_kinds) > 1
            else " The model has one attention per layer: these are its heads."
        ),
    )
    heads = [every[label] for label in chosen]
    state.ablate = spec_text(heads)
    return heads


def translation_card(where, title: str, row: dict) -> None:
    """A translation row (``removed_rows``): its text, log-probability and change."""
    where.markdown(f"**{title}:** {md(row['text']) or '(empty)'}")
    delta = None if row["change"] is None else f"{row['change']:+.2f}"
    where.metric("log-probability", f"{row['log_prob']:.2f}", delta, delta_color="normal")


def removed_view(page: SectionInputs, heads: list[HeadSpec]) -> None:
    """The translation with ``heads`` removed beside the original, then their maps."""
    t, state = page.translation, page.state
    cut = without_heads(page, heads, state.sentence, "")
    if cut is None:
        return
    what = removed_words(heads)
    original, removed = removed_rows(t, cut, heads)
    if not t.forced:
        flags = decode_flag_words(state.settings(), GREEDY)  # the page's decoding
        command = f"python -m core.ablate --checkpoint {shell_word(state.model)} --heads "
        command += " ".join(filter(None, (spec_text(heads), flags, "--sentence TEXT")))
        st.caption(f"{code(command)} prints the same figures.")
    left, right = st.columns(2)
    translation_card(left, "Original", original)
    translation_card(right, what.capitalize(), removed)
    for w in removed["warnings"]:
        right.warning(md(w))
    compare_maps(page, cut, what, heads)


def without_heads(
    page: SectionInputs, heads: list[HeadSpec], sentence: str, sequence: str
) -> Translation | None:
    """The page's input again with ``heads`` removed: ``sentence`` decoded, or ``sequence``
    read in one forced pass; None, with a message, when it cannot be."""
    where = (page.lm, page.entry.path, page.entry.mtime)
    try:
        return ablated_translate(*where, sentence, page.state.settings(), tuple(heads), sequence)
    except (TranslationError, HeadSpecError) as e:
        st.error(md(e))
        return None


def removed_words(heads: list[HeadSpec]) -> str:
    """'1 head removed', '3 heads removed'."""
    return f"{len(heads)} head{'s' * (len(heads) != 1)} removed"


def sequence_card(where, title: str, score: SequenceScore, base: SequenceScore | None) -> None:
    """A forced pass's loss and first choices on the scored tokens (and the change from
    ``base``)."""
    delta = None if base is None else f"{score.loss - base.loss:+.3f}"
    where.markdown(f"**{title}**")
    where.metric("loss (nats per token)", f"{score.loss:.3f}", delta, delta_color="inverse")
    where.caption(f"{score.firsts} of {score.scored} tokens are the model's first choice")


def sequence_removed_view(page: SectionInputs, heads: list[HeadSpec]) -> None:
    """A token-sequence model's pass over its sequence with ``heads`` removed, teacher forced
    as the original is: the loss and first choices on the repeat beside the original's, then
    the maps with and without them."""
    cut = without_heads(page, heads, "", page.state.sentence)
    if cut is None:
        return
    base, score = sequence_score(page.translation), sequence_score(cut)
    what, spec = removed_words(heads), spec_text(heads)
    scored = "its repeat" if base.repeat else "every token"
    st.caption(
        f"The same sequence read again in one pass with these heads removed, each token "
        f"predicted from the ones before it (teacher forcing), scored on {scored}; "
        f"{code(f'python -m core.ablate --heads {spec}')} prints the same."
    )
    left, right = st.columns(2)
    sequence_card(left, "Original", base, None)
    sequence_card(right, what.capitalize(), score, base)
    compare_maps(page, cut, what, heads)


def compare_maps(page: SectionInputs, cut: Translation, what: str, heads: list[HeadSpec]) -> None:
    """The chosen map with and without the heads, then every head of the kind without them."""
    state, maps, stretch = page.state, page.maps, page.stretch
    key = (*page.key[:4], spec_text(heads), cut.forced)  # the original's, plus the heads
    cut_maps = sentence_maps(cut, key, state.words)
    left, right = st.columns(2)
    for col, m, title, tag in ((left, maps, "Original", "orig"), (right, cut_maps, what, "cut")):
        view = select_view(m, state.kind, state.layer, state.head, state.hide)
        view.title = f"{title}: {view.title}"
        name = export_name(state.model, state.sentence, state.kind, state.layer, state.head, tag)
        chart(figs.view_figure(view, stretch), f"ab_{tag}", col, name)
    one = len(page.lm.head_kinds) == 1  # one attention, whose blocks the three kinds are
    here = [h for h in heads if h.kind == state.kind or one]  # a removed head's map in this kind
    if state.head.isdigit() and (state.layer, int(state.head)) in {(h.layer, h.head) for h in here}:
        st.caption(
            "This head is removed: its map is still computed, but its output is zeroed "
            "before W_o, so it no longer changes the output."
        )
    whole = figs.shows_full_grid(cut_maps.layers(state.kind), cut_maps.heads)
    layers = None if whole else [state.layer]
    st.markdown(
        f"**Every head of this kind, {what}** — removed here (outlined in red): "
        f"{', '.join(h.label for h in here) or 'none'}"
    )
    removed = [(h.layer, h.head) for h in here]
    grid = figs.grid_view_figure(cut_maps, state.kind, state.hide, layers, stretch, removed)
    name = export_name(state.model, state.sentence, state.kind, None, None, "grid removed")
    chart(grid, "ab_grid", name=name)


# ----------------------------------------------------------------------------- importance


def importance_panel(entry: ModelEntry, lm: TranslationModel, state: ViewState) -> None:
    """Head importance on validation sentences: from the disk cache, or computed on request."""
    st.subheader("Head importance")
    if problem := lm.supports("importance"):  # it reads no validation sentence
        st.caption(md(problem))
        return
    if (missing := corpus_missing(lm.meta)) is not None:  # before a button that cannot work
        no_corpus(NO_IMPORTANCE, missing)
        return
    here = not lm.supports("own_split")  # its sample: its own validation split
    state.keep_within("importance_sentences", *SAMPLE_SIZES)
    widget_default("ab_sentences", state.importance_sentences)
    state.importance_sentences = n = int(
        st.number_input(
            "Validation sentences",
            min_value=SAMPLE_SIZES[0],
            max_value=SAMPLE_SIZES[1],
            step=50,
            key="ab_sentences",
            help="The first N sentences of the model's validation split."
            if here
            else "The first N validation sentences of fra-eng as the studio splits it by "
            "default (the shipped model's validation sentences), given to the model as text.",
            width=220,
        )
    )
    target = state.target_lang or None
    precision = "float32" if lm.supports("bfloat16") else precision_choice(lm, state)
    result = lookup_importance(entry.path, lm.meta, n, target, precision, model_facts(lm))
    if result is None:
        measures = "the loss" if measure_of(lm) == BY_LOSS else "BLEU and loss"
        st.caption(
            f"Removes each head alone and measures {measures} on the validation "
            "sentences; beside it a gradient score that needs one backward pass. The "
            "result is kept on disk for this model."
        )
        if not st.button("Compute head importance", key="ab_compute"):
            return
        result = compute_importance(entry, lm, n, target, precision)
        if result is None:
            return
    show_importance(result, state, lm)


PRECISION_LABELS = {
    "float32": "float32 (exact)",
    "bfloat16": "bfloat16 (about 3× faster on a CPU that runs it natively)",
}


def precision_choice(lm: TranslationModel, state: ViewState) -> str:
    """A model's precision for head importance (one that may be measured in bfloat16),
    preselected as this machine's ``auto`` resolves it; kept in the view state where another
    is chosen ("" = this machine's)."""
    auto = resolved_precision("auto", lm)
    options = ["bfloat16", "float32"] if auto == "bfloat16" else ["float32", "bfloat16"]
    widget_default("ab_precision", state.precision or auto, options)
    chosen = st.selectbox(
        "Precision",
        options,
        format_func=PRECISION_LABELS.get,
        key="ab_precision",
        help="The passes that remove heads, in bfloat16 (matrix products in bfloat16 summed "
        "in float32, activations in bfloat16) or in float32. The gradient score is float32 "
        "either way. On "
        "the benchmark model the two agree within 0.0001 in every head's loss change.",
        width=420,
    )
    if chosen == state.asked.get("precision"):
        state.granted("precision")  # the machine's own choice, asked by name
    state.precision = "" if chosen == auto else chosen
    return chosen


def compute_importance(
    entry: ModelEntry,
    lm: TranslationModel,
    n: int,
    target_lang: str | None = None,
    precision: str = "float32",
) -> HeadImportance | None:
    """Run importance_for with a progress bar and ETA; None, with a message, if it cannot."""
    bar, report = progress_bar()
    with heavy_slot() as slot:
        if slot is None:
            bar.empty()
            return None
        try:
            result = importance_for(
                lm,
                entry.path,
                n,
                progress=report,
                target_lang=target_lang,
                precision=precision,
            )
        except (DataError, OSError, ValueError, TypeError, TimeLimit) as e:
            bar.empty()
            st.error(md(f"Head importance cannot be computed: {e}"))
            return None
    bar.empty()
    return result


def show_importance(result: HeadImportance, state: ViewState, lm: TranslationModel) -> None:
    """Grids of the change in BLEU and loss, the gradient score, agreement, pruning, CSV."""
    table, by_loss = result.frame(), result.measured == BY_LOSS
    base = abfigs.baseline_words(result)
    how = "read from the disk cache" if result.cached else f"computed in {result.seconds:.0f} s"
    how += " in bfloat16" if result.precision == "bfloat16" else ""
    st.markdown(f"Removing each head alone — {base}; {how}.")
    if by_loss:
        st.caption(f"{lm.loss_words}; the pruning curve in loss, at 10 % steps.")
    name = export_name(state.model, "", what="head importance")
    columns = ["delta_loss"] if by_loss else ["delta_bleu", "delta_loss"]
    tabs = st.tabs([abfigs.METRICS[c][0].split(" with")[0] for c in columns])
    for tab, column in zip(tabs, columns):
        fig = abfigs.importance_grid_figure(table, column, base)
        chart(fig, f"ab_imp_{column}", tab, f"{name}_{column}")
    fig = abfigs.importance_grid_figure(table, "gradient", base)
    chart(fig, "ab_imp_gradient", name=f"{name}_gradient")
    left, right = st.columns(2)
    chart(abfigs.agreement_figure(table, result.agreement()), "ab_agree", left, f"{name}_agree")
    chart(abfigs.pruning_figure(result.pruning, result), "ab_prune", right, f"{name}_prune")
    remove_least_important(result)
    csv = table.to_csv(index=False, lineterminator="\r\n").encode("utf-8")
    st.download_button("Importance table as CSV", csv, f"{name}.csv", "text/csv")


def remove_least_important(result: HeadImportance) -> None:
    """Put the k least important heads (smallest BLEU drop, or loss rise) into the picker."""
    order = result.order()
    row = st.container(horizontal=True, vertical_alignment="bottom")
    row.number_input(
        "Least important heads", 1, len(order), min(4, len(order)), key="ab_least", width=220
    )

    row.button("Remove these heads", key="ab_remove", on_click=use_least, args=(order,))


def use_least(order: list[HeadSpec]) -> None:
    """Button callback: the picker holds the first k heads of ``order`` (k from its input)."""
    st.session_state[HEADS_KEY] = [h.label for h in order[: int(st.session_state["ab_least"])]]
