"""Open any model the studio reads, by one call: its own checkpoints (``.pt``) and Hugging
Face encoder-decoder folders (``save_pretrained`` layout; on the command line also hub ids).

``open_model`` returns a ``TranslationModel`` (``core.model.interface``): the studio's
``StudioModel`` or an ``HFModel``. What else a caller outside ``core/model`` needs to know of
a model's files (is this a model folder, its content's hash, its path as a hub id resolves)
is here too, so nothing outside ``core/model`` reads a Hugging Face folder itself.
"""

from __future__ import annotations

from pathlib import Path

from core.corpus.source import file_sha1
from core.model import hf_folder, hf_model
from core.model.capabilities import HUGGING_FACE, STUDIO
from core.model.checkpoints import CheckpointError, read_metadata
from core.model.interface import TranslationModel
from core.model.studio_model import StudioModel, config_parameters

HFModelError = hf_folder.HFModelError  # a folder that is not a model the studio can open
is_model_folder = hf_folder.is_model_folder  # whether a path holds a model's config.json
describe_folder = hf_folder.describe  # a model folder's config and sizes, read without loading
size_label = hf_folder.size_label  # "marian · 74 M params · ..."
FOLDER_CONFIG = hf_folder.CONFIG  # the file that makes a folder a model folder
count_parameters = config_parameters  # a studio ModelConfig's parameters (as a dict)


def open_model(
    spec: str, device="cpu", max_bytes: int | None = None, hub: bool = False
) -> TranslationModel:
    """A studio checkpoint, or a Hugging Face model folder (a hub id too when ``hub``);
    CheckpointError in one line when it cannot be opened."""
    looks_like_hub = hub and not Path(spec).exists() and hf_folder.HUB_ID.fullmatch(spec or "")
    if hf_folder.is_model_folder(spec) or looks_like_hub:
        try:
            return hf_model.load(hf_folder.resolve(spec), device, max_bytes)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    if Path(spec).is_dir():  # a folder without config.json: read_config says so
        try:
            hf_folder.read_config(spec)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    return StudioModel.load(spec, device)


def model_path(spec: str) -> Path:
    """Where a model opened from ``spec`` lies: the checkpoint file, the folder, or a hub id's
    copy in the local cache."""
    return Path(spec) if Path(spec).is_file() else hf_folder.resolve(spec)


def family_of(path) -> str:
    """The family of the model at ``path``, before opening it: a folder is a Hugging Face
    model, a file a studio checkpoint."""
    return HUGGING_FACE if hf_folder.is_model_folder(path) else STUDIO


def parameters_of(path) -> int:
    """How many parameters the model at ``path`` has, read from its config and weight
    headers (HFModelError or CheckpointError when they cannot be read)."""
    if hf_folder.is_model_folder(path):
        return hf_folder.describe(path)["parameters"]
    return count_parameters(read_metadata(path).get("model_config") or {})


def model_sha1(path) -> str:
    """The SHA-1 of a checkpoint file, or of a Hugging Face model folder's files."""
    return hf_folder.folder_sha1(path) if Path(path).is_dir() else file_sha1(path)
