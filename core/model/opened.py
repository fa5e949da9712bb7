"""Open any model the studio reads, by one call: its own checkpoints (``.pt``) and Hugging
Face model folders (``save_pretrained`` layout; on the command line also hub ids) of an
encoder-decoder, a decoder-only or a masked language model.

``open_model`` returns a ``TranslationModel`` (``core.model.interface``): the studio's
``StudioModel``, an ``HFModel`` (an encoder-decoder), or what ``core.model.lm_loading`` opens:
a ``PromptedModel`` (decoder-only, reading a prompt) or a ``MaskedModel``. What else a caller
outside ``core/model`` needs to know of a model's files (is this a model folder, its content's
hash, its path as a hub id resolves, whether the server may open it within its limits:
``open_problem``) is here too, so nothing outside ``core/model`` reads a
Hugging Face folder itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from core.corpus.source import file_sha1
from core.model import capabilities, hf_folder, hf_model, lm_loading
from core.model.capabilities import HUGGING_FACE, LANGUAGE_MODEL, MASKED_LM, STUDIO
from core.model.checkpoints import CheckpointError, DecoderOnlyCheckpointError, read_metadata
from core.model.interface import TranslationModel
from core.model.parts import DEFAULT_LANGUAGES, TranslationError
from core.model.studio_model import StudioModel, config_parameters
from core.model.studio_model import languages_of as studio_languages

HFModelError = hf_folder.HFModelError  # a folder that is not a model the studio can open
is_model_folder = hf_folder.is_model_folder  # whether a path holds a model's config.json
describe_folder = hf_folder.describe  # a model folder's config and sizes, read without loading
size_label = hf_folder.size_label  # "marian · 74 M params · ..."
FOLDER_CONFIG = hf_folder.CONFIG  # the file that makes a folder a model folder
count_parameters = config_parameters  # a studio ModelConfig's parameters (as a dict)
held_dtype = lm_loading.held_dtype  # the dtype a language model is held in, within a limit
CHECKPOINT, FOLDER = "checkpoint", "folder"  # where a model lies: what ``open_problem``'s
# limits are keyed by (a studio checkpoint file, a Hugging Face model folder)


def open_model(
    spec: str,
    device="cpu",
    max_bytes: int | None = None,
    hub: bool = False,
    prompt: str = "",
    section: str = "",
) -> TranslationModel:
    """A studio checkpoint, or a Hugging Face model folder (a hub id too when ``hub``), a
    decoder-only one reading ``prompt`` ("" = the default template); CheckpointError in one
    line when it cannot be opened, a prompt is given to a model that reads none, or it cannot
    do ``section`` (a command's work: ``TranslationModel.supports``)."""
    m = _opened(spec, device, max_bytes, hub)
    if section and (refusal := m.supports(section)):
        raise CheckpointError(refusal)
    if not prompt:
        return m
    if not m.reads_prompt:
        raise CheckpointError(
            "A prompt template is for decoder-only models; this model reads its source itself."
        )
    try:
        return m.with_prompt(prompt)
    except TranslationError as e:
        raise CheckpointError(str(e)) from e


def _opened(spec: str, device, max_bytes: int | None, hub: bool) -> TranslationModel:
    """The model ``spec`` names (``open_model``'s work before a prompt)."""
    looks_like_hub = hub and hf_folder.is_hub_id(spec)  # owner/name, and no path here
    if hf_folder.is_model_folder(spec) or looks_like_hub:
        try:
            folder = hf_folder.resolve(spec)
            config = hf_folder.read_config(folder)
            if hf_folder.is_language_model(config) or hf_folder.is_masked_lm(config):
                return lm_loading.load(folder, device, max_bytes)
            return hf_model.load(folder, device, max_bytes)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    if Path(spec).is_dir():  # a folder without config.json: read_config says so
        try:
            hf_folder.read_config(spec)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    try:
        return StudioModel.load(spec, device)
    except DecoderOnlyCheckpointError as e:  # a decoder-only run's state: its model is the folder
        if not hf_folder.is_model_folder(e.folder):
            raise
        return _opened(str(e.folder), device, max_bytes, hub=False)


def model_path(spec: str) -> Path:
    """Where a model opened from ``spec`` lies: the checkpoint file, the folder, or a hub id's
    copy in the local cache."""
    return Path(spec) if Path(spec).is_file() else hf_folder.resolve(spec)


def family_of(path) -> str:
    """The family of the model at ``path``, before opening it: a folder is a Hugging Face
    model (a language model where its config says decoder-only), a file a studio checkpoint."""
    if not hf_folder.is_model_folder(path):
        return STUDIO
    try:
        config = hf_folder.read_config(path)
    except hf_folder.HFModelError:
        return HUGGING_FACE
    if hf_folder.is_language_model(config):
        return LANGUAGE_MODEL
    return MASKED_LM if hf_folder.is_masked_lm(config) else HUGGING_FACE


def languages_of(path, meta: dict | None = None) -> tuple[str, str] | None:
    """(source, target) codes the model at ``path`` translates, read from its files before
    opening it, as its ``languages`` will say (a decoder-only model's by the default prompt):
    ("source", "target") where its files do not say; None for a model that does not translate
    (``supports("translate")``: a masked language model, an induction model). ``meta``: a
    checkpoint's metadata, where already read."""
    family = family_of(path)
    config = {} if family == STUDIO else hf_folder.read_config(path)
    if capabilities.problem(family, "", "translate", hf_folder.studio_task(config)):
        return None  # a masked language model; a model trained here on random tokens
    if family == STUDIO:
        return studio_languages(read_metadata(path) if meta is None else meta)
    if family == LANGUAGE_MODEL:
        return DEFAULT_LANGUAGES
    said = hf_folder.languages(path, config)
    return said.get("source_lang") or "source", said.get("target_lang") or "target"


def parameters_of(path) -> int:
    """How many parameters the model at ``path`` has, read from its config and weight
    headers (HFModelError or CheckpointError when they cannot be read)."""
    if hf_folder.is_model_folder(path):
        info = hf_folder.describe(path)  # the config's count, or the weights' if they hold more
        return max(info["config_parameters"] or 0, info["parameters"])
    return count_parameters(read_metadata(path).get("model_config") or {})


def open_problem(
    path, limits: Mapping[str, int], too_large: Callable[[int, int], str | None]
) -> str | None:
    """Why the server will not open the model at ``path`` (None: it will), read before loading
    it (its config and weight headers; a damaged file is left for loading to name): its bytes
    within ``limits[CHECKPOINT]`` or ``limits[FOLDER]``, where it lies; a language model's in
    bfloat16 where only that fits and the processor computes it natively (``held_dtype``, as
    loading holds it), the rest in float32, ``too_large(parameters, limit)`` the words for
    one that passes."""
    try:
        count = parameters_of(path)
    except HFModelError as e:
        return str(e)
    except (CheckpointError, TypeError, ValueError, RuntimeError):
        return None
    if not hf_folder.is_model_folder(path):
        return too_large(count, limits[CHECKPOINT])
    if family_of(path) in (LANGUAGE_MODEL, MASKED_LM):  # bfloat16 where only that fits
        try:
            held_dtype(count, limits[FOLDER], "cpu")
        except HFModelError as e:
            return str(e)
        return None
    return too_large(count, limits[FOLDER])


def model_sha1(path) -> str:
    """The SHA-1 of a checkpoint file, or of a Hugging Face model folder's files."""
    return hf_folder.folder_sha1(path) if Path(path).is_dir() else file_sha1(path)
