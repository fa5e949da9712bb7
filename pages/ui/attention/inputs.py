"""What every section of the Attention page draws from: model, translation, maps, view."""

from __future__ import annotations

from dataclasses import dataclass

from core.attention.sentence_maps import SentenceMaps
from core.model.interface import TranslationModel
from core.model.parts import Translation
from core.runs.catalogue import ModelEntry
from pages.ui.view_state import ViewState


@dataclass(frozen=True)
class SectionInputs:
    """The page's chosen model, its translation of the sentence and the maps shown."""

    entry: ModelEntry  # the chosen model (model A when two are compared)
    lm: TranslationModel  # that model, loaded
    translation: Translation  # the sentence decoded with the view's settings
    pieces: SentenceMaps  # its maps over the model's own tokens (BPE pieces unmerged)
    maps: SentenceMaps  # its maps as shown (pieces merged into words when the view asks)
    state: ViewState  # the view; sections write their widgets' values back into it
    stretch: bool  # colour scales topped at the 99th percentile instead of 1

    @property
    def key(self) -> tuple:
        """What names the translation in the caches: model file, sentence, decoding settings
        and the target the user typed ("" for the model's own)."""
        s = self.state
        return (self.entry.path, self.entry.mtime, s.sentence, s.settings(), s.target)
