"""Cached calls of the "Inside a head" and "Logit lens" sections, and of a model's head roles
(the "Maps" section)."""

from __future__ import annotations

from core.attention import head_roles, logit_lens, query_key
from core.model.interface import TranslationModel
from core.model.parts import Translation
from pages.ui.shared_cache import shared


@shared()
def query_key_view(
    _lm: TranslationModel, _t: Translation, key: tuple, kind: str, layer: int, head: int, query: int
) -> query_key.QueryKey:
    """One query of one head taken apart (``key``: model file, sentence, decoding settings, a
    prompt template)."""
    return query_key.query_key_view(_lm, _t, kind, layer, head, query)


@shared()
def lens(_lm: TranslationModel, _t: Translation, key: tuple) -> logit_lens.LogitLens:
    """The logit lens of a cached translation (``key``: model file, sentence, settings)."""
    return logit_lens.logit_lens(_lm, _t)


@shared()
def roles(_lm: TranslationModel, _t: Translation, key: tuple) -> head_roles.HeadRoles:
    """A model's head roles on a cached translation, every attention (``key``: as ``lens``'s)."""
    return head_roles.head_roles(_lm, _t)
