"""The studio from a notebook: open any model, translate, record every hook site, attribute and
patch by the library calls the pages and commands make, each result drawn by the pages' own
Plotly figures (shown inline in Jupyter).

    from core import notebook as studio
    m = studio.open_model("checkpoints/fra-eng-small.pt")
    t = studio.translate(m, "I'm home.")
    studio.grid_figure(t, "cross")                  # every head, as the Attention page draws it
    studio.attribution_figure(studio.attribute(m, t, "alti"))
    studio.patching_figures(studio.patch(m, "the boy is tall .", "the girl is tall ."))
    studio.logit_attribution_figure(studio.logit_attribution(m, t))
    studio.circuits("checkpoints/induction-2l.history")     # heads forming over training

Nothing here computes: each function is one call of the library (``core.model``,
``core.attention``, ``core.attribution``, ``core.figures``) that the commands and pages call
too, so a notebook, ``python -m core.*`` and the app give the same numbers. docs/notebook.md
lists the functions; docs/notebook.ipynb uses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import plotly.graph_objects as go
import torch

from core.attention import logit_attribution as dla
from core.attention.attribution_patching import Estimated, attribution_patch
from core.attention.kinds import KINDS
from core.attention.maps import select_view
from core.attention.patching import DIRECTIONS, Patching
from core.attention.patching import patch as patched
from core.attention.path_patching import LOGITS, PathPatching, path_patch_named
from core.attention.sentence_maps import SentenceMaps
from core.attention.word_maps import shown_maps
from core.attribution.explain import Explained, explain, explain_contrast, in_words
from core.attribution.gradients import DEFAULT_CHOICES, GradientChoices
from core.attribution.methods import MEAN, METHOD_NAMES, AttributionError
from core.command_line import target_lang_problem
from core.figures import attention as attention_figures
from core.figures import attribution as attribution_figures
from core.figures import circuits as circuit_figures
from core.figures import logit_attribution as dla_figures
from core.figures import patching as patch_figures
from core.model import opened
from core.model.checked_translation import translate_sentence
from core.model.interface import TranslationModel
from core.model.parts import (
    ALPHA,
    MAX_LEN,
    DecodeSettings,
    Translation,
    TranslationError,
    decode_problem,
)
from core.model.record import Record
from core.runs.circuit_history import phase_of, run_circuit_lines
from core.runs.history import open_history
from core.training.devices import pick_device


def open_model(spec: str, prompt: str = "", device: str = "cpu") -> TranslationModel:
    """A studio checkpoint (``.pt``), a Hugging Face model folder or (online) a hub id, opened
    as the commands open it (``prompt``: a decoder-only model's template, "" = its default)."""
    kind = device.split(":")[0]  # cuda:1 is a cuda device
    if kind not in ("auto", "cpu", "cuda", "mps"):
        raise ValueError(f"device={device!r}: give 'auto', 'cpu', 'cuda' ('cuda:1' …) or 'mps'.")
    checked = pick_device(kind)  # ValueError where this machine has none
    device = checked.type if kind == "auto" else device
    return opened.open_model(spec, device, hub=True, prompt=prompt)


def translate(
    m: TranslationModel,
    sentence: str,
    beam: int = 1,
    target: str = "",
    target_lang: str = "",
    max_len: int = MAX_LEN,
    alpha: float = ALPHA,
) -> Translation:
    """A checked translation with every attention map (greedy, or a beam of ``beam``), as the
    Translate and Attention pages and ``core.attribute`` make it; ``target``: that translation
    teacher-forced instead (each token's probability and rank in ``token_probs``, ``ranks``)."""
    settings = DecodeSettings(beam, alpha, max_len, target_lang=target_lang)
    if problem := decode_problem(settings) or target_lang_problem(target_lang, m):
        raise TranslationError(problem.replace("--target-lang", "target_lang"))  # as the commands
    return translate_sentence(m, sentence, settings, target)


def maps(t: Translation, words: bool = False) -> SentenceMaps:
    """The translation's three kinds of attention as numpy arrays with their tokens (per kind
    ``(L, H, Tq, Tk)``), BPE pieces merged into words if asked, as the Attention page reads them."""
    return shown_maps(SentenceMaps.from_translation(t), words)


def head_figure(
    t: Translation,
    kind: str = "cross",
    layer: int = 0,
    head: int | str = 0,
    words: bool = False,
    hide: bool = False,
) -> go.Figure:
    """One head's map large (``head``: a number, "mean" or "max"; the encoder also "rollout"),
    the Attention page's large map; ``hide`` leaves out the start and end tokens' columns
    (ValueError for a layer or head the model lacks, as for a kind)."""
    try:
        view = select_view(_drawn(t, kind, words), kind, layer, head, hide)
    except IndexError as e:  # "Layer 9 does not exist (0..1).": what the page's choices bound
        raise ValueError(str(e)) from None
    return attention_figures.view_figure(view)


def grid_figure(
    t: Translation,
    kind: str = "cross",
    layers: Sequence[int] | None = None,
    words: bool = False,
    hide: bool = False,
) -> go.Figure:
    """Every head of the ``layers`` (default all) of one kind ("encoder", "decoder_self",
    "cross"), the Attention page's overview."""
    shown = _drawn(t, kind, words)
    count = getattr(shown, kind).shape[0]  # (L, H, Tq, Tk)
    if layers is not None and not all(0 <= layer < count for layer in layers):
        raise ValueError(f"layers must be among 0..{count - 1} (got {list(layers)}).")
    return attention_figures.grid_view_figure(shown, kind, hide, layers)


def _drawn(t: Translation, kind: str, words: bool) -> SentenceMaps:
    """``maps(t, words)`` when ``kind`` is one of its kinds with weights to draw; ValueError in
    one line otherwise (an unknown kind; a model that reads no source has no encoder or
    cross-attention)."""
    if kind not in KINDS:
        raise ValueError(f"Unknown attention kind {kind!r}; use one of {list(KINDS)}.")
    shown = maps(t, words)
    if not getattr(shown, kind).size:
        raise ValueError(f"This model reads no source: it has no {kind} weights to draw.")
    return shown


def record(m: TranslationModel, t: Translation) -> Record:
    """The recorded pass the analysis reads (every attention's inputs, weights and output, the
    stream around each sub-layer, each layer's input and output, the logits): the
    translation's output teacher-forced, in eval mode, as ``run_with_cache`` records one. Every
    family's has the same shape: a model of one sequence (decoder-only, masked) gives its three
    kinds as blocks of its one attention, and its whole sequence in ``one_stack``."""
    return m.forced(t.src_ids, t.out_ids)


def cache(
    m: TranslationModel, t: Translation, sites: Sequence[str] | None = None
) -> dict[str, torch.Tensor]:
    """{hook site: activation} of one teacher-forced pass of the translation: every site of
    ``m.hook_points()`` the pass reaches (``encoder.0.self.pattern``, ``decoder.1.cross.z`` …),
    or only ``sites``."""
    sites = [sites] if isinstance(sites, str) else sites  # one site: not read letter by letter
    src, tgt_in, _ = m.forced_batch(t.src_ids, t.out_ids)  # (1, S), (1, T)
    with m.evaluating(), torch.no_grad():
        return m.captured(src, tgt_in, sorted(m.hook_points()) if sites is None else sites)


def attribute(
    m: TranslationModel,
    t: Translation,
    method: str = "alti",
    layer: int | None = None,
    head: str = MEAN,
    contrast: str = "",
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Explained:
    """What each source and prefix token contributes to each output token by ``method`` (one
    of ``core.attribution.methods.METHODS``), over the model's own tokens, as the Attribution
    section and ``core.attribute`` compute it; ``contrast``: why the translation rather than
    this one (a contrastive method: grad-input, integrated-gradients …)."""
    if problem := m.supports("attribution"):  # what the command refuses as it opens the model
        raise AttributionError(problem)
    if contrast.strip():
        return explain_contrast(m, t, contrast, method, choices)
    return explain(m, t, method, layer, head, choices)


def attribution_figure(e: Explained, words: bool = False, stretch: bool = False) -> go.Figure:
    """The Attribution section's matrix: output tokens × [source | target prefix] (``words``:
    BPE pieces merged; ``stretch``: the colour scale topped at the 99th percentile)."""
    shown = in_words(e) if words else e
    visible = attribution_figures.visible_prefix(e, words)
    title = e.name or METHOD_NAMES[e.attribution.method]
    notes = [] if e.attribution.completeness is None else [
        f"completeness error {e.attribution.completeness:.1%}"
    ]  # fmt: skip
    return attribution_figures.contribution_figure(shown, title, visible, stretch, notes)


def source_share_figure(e: Explained, words: bool = False) -> go.Figure:
    """How much each output token takes from the source, flagged where it is mostly the
    prefix (the Attribution section's bars)."""
    shown = in_words(e) if words else e
    name = e.name or METHOD_NAMES[e.attribution.method]
    title = f"How much each output token takes from the source ({name})"
    return attribution_figures.source_share_figure(shown, title)


def patch(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
) -> Patching:
    """Activation patching of every head and every residual position between two sources of
    one length, as the Patching section and ``core.patch`` run it (``rows``: one per
    component, ``summary()``: the metrics and the caveat of a small gap)."""
    if problem := m.supports("patch"):  # what the command refuses as it opens the model
        raise TranslationError(problem)
    return patched(
        m, clean, corrupt, None, direction=direction, prefix=prefix, answers=_answer_pair(answers),
        target_lang=target_lang or None,
    )  # fmt: skip


def patching_figures(p: Patching, what: str = "") -> tuple[go.Figure, go.Figure]:
    """(every head's effect, the residual stream's effect per layer and position): the
    Patching section's two grids (``what``: added to their subtitle, as an estimate's)."""
    runs = ("the clean run", "the corrupted run")
    about = " into ".join(runs if p.direction == DIRECTIONS[0] else runs[::-1]) + what
    heads = patch_figures.heads_figure(p.rows, about, p.direction)
    stream = patch_figures.stream_figure(p.rows, p.clean, p.prefix, about, p.direction)
    return heads, stream


def attribution_patching(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    exact: bool = True,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
) -> Estimated:
    """Attribution patching: every head's and residual position's effect estimated from one
    gradient (rows' ``estimate``), beside real patching's (``effect``, ``spearman``,
    ``largest_error``; ``exact=False``: the estimate alone), as the Patching section's
    "attribution" method and ``core.patch --method attribution`` compute it."""
    if problem := m.supports("patch"):
        raise TranslationError(problem)
    return attribution_patch(
        m, clean, corrupt, None, exact, direction=direction, prefix=prefix,
        answers=_answer_pair(answers), target_lang=target_lang or None,
    )  # fmt: skip


def estimate_figures(done: Estimated) -> tuple[go.Figure, go.Figure]:
    """(every head's estimated effect, the residual stream's): the Patching section's grids
    of attribution patching's estimate (``patching_figures(done.patching)``: the real ones)."""
    guess = dataclasses.replace(done.patching, rows=done.estimate_rows())
    return patching_figures(guess, ": attribution patching's estimate")


def path_patch(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    receivers: str = LOGITS,
    sender: str = "",
    freeze_mlps: bool = False,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
) -> PathPatching:
    """Path patching (Wang et al. 2023): each sender head's (every head's, or ``sender``'s,
    written L.H or kind:L.H) effect through ``receivers`` only ("logits", or heads separated
    by commas), the other heads frozen (``freeze_mlps``: the MLPs too), as the Patching
    section's "path" method and ``core.patch --receivers`` compute it."""
    if problem := m.supports("patch"):
        raise TranslationError(problem)
    return path_patch_named(
        m, clean, corrupt, receivers, sender, direction=direction, prefix=prefix,
        answers=_answer_pair(answers), target_lang=target_lang or None, freeze_mlps=freeze_mlps,
    )  # fmt: skip


def path_patching_figure(done: PathPatching) -> go.Figure:
    """Every sender head's effect through the receivers: the Patching section's grid."""
    p, runs = done.patching, ("the clean run", "the corrupted run")
    about = " into ".join(runs if p.direction == DIRECTIONS[0] else runs[::-1])
    mlps = "frozen too" if done.freeze_mlps else "recomputed"
    about = f"{about}, each head through {', '.join(done.receivers)} only (MLPs {mlps})"
    return patch_figures.heads_figure(p.rows, about, p.direction)


def logit_attribution(
    m: TranslationModel,
    t: Translation,
    step: int | None = None,
    answer: str = "",
    wrong: str = "",
) -> dla.LogitAttribution:
    """Direct logit attribution: one output step's (default: the last) logit of ``answer``
    (default: the word written), minus ``wrong``'s where given, taken apart into each head's,
    each MLP's, each bias's and the embeddings' terms (``lines()``: the command's JSON lines,
    ``per_layer()``, ``accumulated()``), as the Direct logit attribution section and
    ``core.logit_attribution`` compute it."""
    return dla.logit_attribution(m, t, step, answer or None, wrong or None)


def logit_attribution_figure(a: dla.LogitAttribution) -> go.Figure:
    """The Direct logit attribution section's figure: each attention's heads × layers grid,
    the per-layer bars and the accumulated stream."""
    return dla_figures.logit_attribution_figure(a)


def circuits(run: str) -> tuple[list[dict], list[go.Figure]]:
    """A run's (or a shipped model's ``.history``'s) circuit scores over training: the lines
    ``python -m core.circuits`` prints (one per evaluation, then the phase change) and the
    Train page's four charts (each head's induction, previous-token and duplicate-token
    scores, the copies' losses and ICL), the phase change shaded."""
    lines = run_circuit_lines(run)  # ValueError where the command refuses
    records = open_history(run).read_metrics()
    return lines, circuit_figures.circuit_figures(records, phase_of(records))


def _answer_pair(answers: tuple[str, str] | None) -> tuple[str, str] | None:
    """The patching functions' ``answers`` (TranslationError for one word given alone, which
    would be read letter by letter)."""
    if isinstance(answers, str):
        raise TranslationError(f"answers is a pair of words, e.g. ({answers!r}, 'another').")
    return answers
