"""Core calls the Translate and Attention pages cache: translations, maps, snapshots,
attributions."""

from __future__ import annotations

import streamlit as st

from core.attention import maps, snapshots, word_maps
from core.attribution.explain import Explained, explain
from core.model import checked_translation as translation
from core.model.checkpoints import LoadedModel
from core.model.decode import DecodeSettings, Translation


@st.cache_data(show_spinner=False, max_entries=256)
def translate(
    _lm: LoadedModel, path: str, mtime: float, sentence: str, settings: DecodeSettings
) -> Translation:
    """A checked translation with all maps, cached per model file, sentence and settings."""
    return translation.translate_sentence(_lm, sentence, settings)


@st.cache_data(show_spinner="Rebuilding the validation split…", max_entries=8)
def validation_examples(_meta: dict, data_key: str):
    """Validation sentences of a model's corpus (slow once, then cached by data settings)."""
    return translation.validation_examples(_meta)


@st.cache_data(show_spinner=False, max_entries=64)
def sentence_maps(_t: Translation, key: tuple, words: bool = False) -> maps.SentenceMaps:
    """The numpy maps of a cached translation (subword pieces merged into words if asked)."""
    return word_maps.shown_maps(maps.SentenceMaps.from_translation(_t), words)


@st.cache_data(show_spinner=False, max_entries=32)
def teacher_forced(
    _lm: LoadedModel, key: tuple, sentence: str, reference: str, words: bool = False
):
    """Teacher-forced maps of a reference, cached per model, sentence and reference."""
    return word_maps.shown_maps(maps.teacher_forced_maps(_lm, sentence, reference), words)


@st.cache_data(show_spinner="Reading training snapshots…", max_entries=16)
def snapshot_series(source: str, sentence: str, steps: tuple) -> snapshots.SnapshotSeries:
    """A probe sentence's snapshots in a run or history file (re-read on new ones)."""
    return snapshots.snapshot_series(source, sentence)


@st.cache_data(show_spinner=False, max_entries=16)
def probe_sentences(source: str, steps: tuple) -> list[str]:
    """The probe sentences of a run or history file."""
    return snapshots.probe_sentences(source)


@st.cache_data(show_spinner=False, max_entries=64)
def explanation(
    _lm: LoadedModel, _t: Translation, key: tuple, method: str, layer: int | None, head: str
) -> Explained:
    """One method's attribution of a cached translation (``key``: model file, sentence and
    decoding settings), over the model's own tokens; merge into words with in_words."""
    return explain(_lm, _t, method, layer, head)
