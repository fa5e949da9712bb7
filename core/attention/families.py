"""Which of the Attention page's sections read which family of models, and one line saying
why where a section does not read a Hugging Face model (``core.model.hugging_face``)."""

from __future__ import annotations

from core.model.opened import is_hugging_face

HF_SECTIONS = (
    *("maps", "playback", "ablation", "compare", "lens", "inside", "attribution", "alignment"),
    "project",
)
HF_NOT_YET = {  # the other section reads the studio's training files
    "training": "A Hugging Face model was not trained here: it has no snapshots to replay.",
    "patch": "Activation patching reads the studio's own models for now.",
}


def section_problem(lm, section: str) -> str | None:
    """Why this section cannot show this model (None: it can)."""
    if is_hugging_face(lm) and section not in HF_SECTIONS:
        return HF_NOT_YET.get(section, "Not available for Hugging Face models.")
    return None


def source_label(lm) -> str:
    """The sentence box's label: "English sentence", or the model's source language."""
    if not is_hugging_face(lm):
        return "English sentence"
    source, _ = lm.languages
    return "Source sentence" + (f" ({source})" if source != "source" else "")


def target_label(lm) -> str:
    """The target language as a box names it: "French", or the model's target language."""
    if not is_hugging_face(lm):
        return "French"
    _, target = lm.languages
    return target if target != "target" else "target language"
