"""Cached calls of the "Remove heads" section: translations with heads removed."""

from __future__ import annotations

import threading

import streamlit as st

from core.attention import ablation as ablate
from core.model import checked_translation as translation
from core.model.checkpoints import LoadedModel
from core.model.decode import DecodeSettings, Translation


@st.cache_resource(show_spinner=False, max_entries=4)
def private_model(_lm: LoadedModel, path: str, mtime: float) -> tuple[LoadedModel, threading.Lock]:
    """A copy of the model whose head gates this section sets, and the lock that guards it.

    The loaded model is shared by every session and never has gates set; sessions take
    turns on the copy.
    """
    return ablate.private_copy(_lm), threading.Lock()


@st.cache_data(show_spinner=False, max_entries=128)
def ablated_translate(
    _lm: LoadedModel, path: str, mtime: float, sentence: str, settings: DecodeSettings, spec: str
) -> Translation:
    """A checked translation with the heads of ``spec`` removed, cached per model and input."""
    own, lock = private_model(_lm, path, mtime)
    heads = ablate.heads_of(spec, own.model.cfg)
    with lock, ablate.ablated(own.model, heads):
        return translation.translate_sentence(own, sentence, settings)
