"""Core calls the Translate and Attention pages cache: translations, maps, snapshots,
attributions, kept for every session within the server's byte budget (``shared_cache``)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from core.attention import head_stats, maps, snapshots, word_maps
from core.attribution.explain import Explained, explain, explain_contrast
from core.attribution.file_mode import Aggregated, FileModeError, aggregate, iter_records
from core.attribution.gradients import DEFAULT_CHOICES, GradientChoices
from core.attribution.step_scores import StepScores, step_scores
from core.corpus.text import tokenize
from core.model import checked_translation as translation
from core.model.interface import TranslationModel
from core.model.parts import DecodeSettings, Translation, TranslationError
from core.runs import budget
from pages.ui.shared_cache import shared


def fitted(lm: TranslationModel, sentence: str, settings: DecodeSettings, target: str = ""):
    """(settings, note): the decoding settings whose translation fits the server's budget
    (budget.TRANSLATION_BYTES), with the longest output cut when it must be, and a note
    saying so ("" when nothing changed); TranslationError when no output length fits, or
    when a ``target`` to force (which cannot be cut) does not fit."""
    words, aim = tokenize(sentence or ""), tokenize(target or "")
    longest_input = translation.MAX_SENTENCE_TOKENS
    if not words or len(words) > longest_input or len(aim) > longest_input:
        return settings, ""  # translate_sentence says what is wrong with it
    cfg = vars(lm.cfg)
    src = lm.token_count(sentence, words)
    limit = budget.size_words(budget.TRANSLATION_BYTES)
    if aim:
        out = lm.token_count(target, aim, target=True)
        if budget.translation_bytes(cfg, src, out) > budget.TRANSLATION_BYTES:
            need = budget.size_words(budget.translation_bytes(cfg, src, out))
            raise TranslationError(
                f"The maps of this sentence and your translation would take {need} with this "
                f"model, and the server holds at most {limit} per translation: use shorter "
                "sentences."
            )
        return settings, ""
    longest = budget.longest_output(cfg, src, settings.max_len)
    if longest == 0:
        need = budget.size_words(budget.translation_bytes(cfg, src, 1))
        raise TranslationError(
            f"This sentence's attention maps would take {need} with this model "
            f"({cfg['num_heads']} heads, {cfg['num_encoder_layers']}+"
            f"{cfg['num_decoder_layers']} layers), and the server holds at most {limit} per "
            "translation: use a shorter sentence."
        )
    if longest >= budget.output_len(settings.max_len, cfg["max_positions"]):
        return settings, ""  # all it would decode fits
    note = (
        f"The longest output was cut from {settings.max_len} to {longest} tokens: with this "
        f"model's {cfg['num_heads']} heads and {cfg['num_encoder_layers']}+"
        f"{cfg['num_decoder_layers']} layers, longer outputs' maps would pass the {limit} "
        "the server holds per translation."
    )
    return replace(settings, max_len=longest), note


def translate(
    lm: TranslationModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    target: str = "",
) -> Translation:
    """A checked translation with all maps, cached per model file, sentence and settings
    (and a ``target`` to force instead of decoding), within the server's budget for one
    translation."""
    settings, note = fitted(lm, sentence, settings, target)
    return _translate(lm, path, mtime, sentence, settings, note, target)


@shared()
def _translate(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    note: str,
    target: str = "",
) -> Translation:
    """translate_sentence, with ``note`` among its warnings."""
    t = translation.translate_sentence(_lm, sentence, settings, target)
    t.warnings += [note] if note else []
    return t


@shared(spinner="Rebuilding the validation split…")
def validation_examples(_meta: dict, data_key: str):
    """Validation sentences of a model's corpus (slow once, then cached by data settings)."""
    return translation.validation_examples(_meta)


@shared()
def sentence_maps(_t: Translation, key: tuple, words: bool = False) -> maps.SentenceMaps:
    """The numpy maps of a cached translation (subword pieces merged into words if asked)."""
    return word_maps.shown_maps(maps.SentenceMaps.from_translation(_t), words)


@shared()
def head_table(_maps: maps.SentenceMaps, key: tuple, words: bool, kind: str):
    """Head statistics of one kind on the full maps ``sentence_maps(_, key, words)`` gave
    (whatever is hidden): the same for every rerun and session that shows them."""
    return head_stats.head_table(_maps, kind)


def teacher_forced(
    lm: TranslationModel,
    key: tuple,
    sentence: str,
    reference: str,
    words: bool = False,
    target_lang: str = "",
):
    """Teacher-forced maps of a reference, cached per model, sentence, reference and (for a
    multilingual model) target language, within the server's budget for one translation
    (TranslationError, before any pass, for a reference whose maps would not fit)."""
    fitted(lm, sentence, DecodeSettings(target_lang=target_lang), reference)
    return _teacher_forced(lm, key, sentence, reference, words, target_lang)


@shared()
def _teacher_forced(
    _lm: TranslationModel, key: tuple, sentence: str, reference: str, words: bool, target_lang: str
):
    """maps.teacher_forced_maps, in the pieces or the words asked for."""
    forced = maps.teacher_forced_maps(_lm, sentence, reference, target_lang or None)
    return word_maps.shown_maps(forced, words)


@shared(spinner="Reading training snapshots…")
def snapshot_series(source: str, sentence: str, steps: tuple) -> snapshots.SnapshotSeries:
    """A probe sentence's snapshots in a run or history file (re-read on new ones)."""
    return snapshots.snapshot_series(source, sentence)


@shared()
def probe_sentences(source: str, steps: tuple) -> list[str]:
    """The probe sentences of a run or history file."""
    return snapshots.probe_sentences(source)


@shared()
def probe_noun(source: str, steps: tuple) -> str:
    """What the probes of a run or history file are: "sequence" or "sentence"."""
    return snapshots.probe_noun(source)


@shared()
def scores_of_steps(
    _lm: TranslationModel,
    _t: Translation,
    key: tuple,
    foil: tuple[int, ...] | None,
    contrast_source: tuple[int, ...] | None = None,
) -> StepScores:
    """The step scores of a cached translation (against the ``foil`` ids, and P-CXMI against
    the ``contrast_source`` ids, where given)."""
    other = None if contrast_source is None else list(contrast_source)
    return step_scores(_lm, _t, None if foil is None else list(foil), other)


@shared()
def contrast_explanation(
    _lm: TranslationModel,
    _t: Translation,
    key: tuple,
    foil: tuple[int, ...],
    method: str,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Explained:
    """A contrastive attribution of a cached translation against the ``foil`` ids."""
    return explain_contrast(_lm, _t, list(foil), method, choices)


@shared()
def explanation(
    _lm: TranslationModel,
    _t: Translation,
    key: tuple,
    method: str,
    layer: int | None,
    head: str,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Explained:
    """One method's attribution of a cached translation (``key``: model file, sentence and
    decoding settings), over the model's own tokens; merge into words with in_words.
    ``choices``: the gradient methods' baseline, steps, aggregation and function."""
    return explain(_lm, _t, method, layer, head, choices)


def uploaded_results(data: bytes) -> Aggregated | str:
    """A results file of ``core.attribute --input`` as uploaded, summed up (``aggregate``,
    one line at a time), or why it cannot be read: once per file's bytes for every session,
    not again at every rerun while it sits in the uploader."""
    return _uploaded_results(hashlib.sha256(data).hexdigest(), data)


@shared(spinner="Reading the results file…")
def _uploaded_results(digest: str, _data: bytes) -> Aggregated | str:
    """``uploaded_results`` of the bytes whose SHA-256 is ``digest``."""
    try:
        return aggregate(iter_records(_data))
    except FileModeError as e:
        return str(e)
