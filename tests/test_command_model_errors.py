"""A model a command cannot open is one plain line (issue 68, item 7; issue 69, item 12): a
missing local file says there is no such file (a path is never taken for a hub id), and a file
that is not a checkpoint (a .tsv, /bin/ls) says so without PyTorch's ``weights_only`` paragraph,
on every command that reads a model and in the model list."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from core.model import hf_folder
from core.runs import catalogue

NOT_OURS = "is not an Attention Studio checkpoint or a Hugging Face model folder"


def argv_of(command: str, model: str, tmp_path: Path) -> list[str]:
    """The least each command that reads a model needs, with ``model`` as that model."""
    return {
        "translate": ["--checkpoint", model, "hi"],
        "evaluate": ["--checkpoint", model],
        "ablate": ["--checkpoint", model],
        "attribute": ["--checkpoint", model, "hi"],
        "align": ["--checkpoint", model, "--held-out"],
        "patch": ["--checkpoint", model, "--clean", "a b", "--corrupt", "c d"],
        "inside_head": ["--checkpoint", model, "--sentence", "hi"],
        "head_scores": ["--checkpoint", model],
        "logit_attribution": ["--checkpoint", model, "--source", "hi"],
        "project": ["--checkpoint", model],
        "trajectories": ["--checkpoint", model],
        "checkpoint": [model, str(tmp_path / "copy.pt")],
    }[command]


COMMANDS = (
    "translate", "evaluate", "ablate", "attribute", "align", "patch", "inside_head", "project",
    "trajectories", "checkpoint", "head_scores", "logit_attribution",
)  # fmt: skip


def one_error(command: str, argv: list[str], capsys) -> str:
    """The command's one error line (it must exit with 2 and print nothing else to stderr)."""
    assert importlib.import_module(f"core.{command}").main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note:")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "weights_only" not in err[0] and "Traceback" not in err[0]
    return err[0]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No download is ever tried, and the current folder is an empty one of the test's."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("missing", ["nope.pt", "checkpoints/nope.pt", "checkpoints/nope"])
def test_a_missing_local_checkpoint_is_no_such_file(command, missing, offline, tmp_path, capsys):
    """Ends in .pt, or its first part is a folder here: a local path, never the hub."""
    line = one_error(command, argv_of(command, missing, tmp_path), capsys)
    assert "Hugging Face hub" not in line and "hub id" not in line, line
    assert "no such file" in line.lower() and "nope" in line, line


@pytest.mark.parametrize(
    ("spec", "hub"),
    [
        ("Helsinki-NLP/opus-mt-en-fr", True),
        ("meta-llama/Llama-3.1-8B", True),
        ("nope.pt", False),
        ("checkpoints/nope.pt", False),
        ("checkpoints/opus-mt-en-fr", False),  # checkpoints/ is a folder here
        ("owner/model.pt", False),
        ("./owner/model", False),
        ("/abs/owner", False),
        ("a/b/c", False),
    ],
)
def test_only_an_owner_name_that_is_no_path_here_is_a_hub_id(spec, hub, offline):
    assert hf_folder.is_hub_id(spec) is hub


def test_a_hub_id_offline_still_says_hub(offline, tmp_path, capsys):
    line = one_error("translate", argv_of("translate", "someone/some-model", tmp_path), capsys)
    assert "hub" in line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["tsv", "binary", "empty"])
def test_a_foreign_file_is_one_line(command, kind, tmp_path, capsys, monkeypatch):
    """A corpus file, a program (/bin/ls) or an empty file as the checkpoint: one line."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / {"tsv": "pairs.tsv", "binary": "ls", "empty": "empty.pt"}[kind]
    if kind == "tsv":
        path.write_text("go .\tva !\nhi .\tsalut !\n", encoding="utf-8")
    elif kind == "binary":
        shutil.copy("/bin/ls", path)
    else:
        path.write_bytes(b"")
    line = one_error(command, argv_of(command, str(path), tmp_path), capsys)
    assert f"error: {path.name} {NOT_OURS}" in line, line
    assert len(line) < 200, line


def test_the_model_list_gives_the_same_one_line(tmp_path, monkeypatch):
    """The catalogue lists a foreign file with that one line as its reason."""
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    (tmp_path / "checkpoints").mkdir()
    shutil.copy("/bin/ls", tmp_path / "checkpoints" / "ls.pt")
    (tmp_path / "checkpoints" / "pairs.pt").write_text("go .\tva !\n", encoding="utf-8")
    entries = {e.key: e for e in catalogue.list_models()}
    for key in ("checkpoints/ls.pt", "checkpoints/pairs.pt"):
        reason = entries[key].reason
        assert not entries[key].usable and NOT_OURS in reason, reason
        assert "\n" not in reason and "weights_only" not in reason and len(reason) < 200


def test_every_reason_in_the_model_list_is_one_line(tmp_path, monkeypatch):
    """Whatever a library's error says (transformers' run over several lines), one line."""
    from core.model import opened
    from core.model.checkpoints import CheckpointError

    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    (tmp_path / "checkpoints" / "folder").mkdir(parents=True)
    (tmp_path / "checkpoints" / "folder" / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "checkpoints" / "model.pt").write_bytes(b"x")

    def folder_fails(*_):
        raise opened.HFModelError("the tokenizer cannot be read:\n  line two\n\nline three")

    def file_fails(*_):
        raise CheckpointError("model.pt is odd:\nsecond line")

    monkeypatch.setattr(catalogue, "_folder_info", folder_fails)
    monkeypatch.setattr(catalogue, "_checkpoint_info", file_fails)
    entries = {e.key: e for e in catalogue.list_models()}
    assert entries["checkpoints/folder/"].reason == (
        "the tokenizer cannot be read: line two line three"
    )
    assert entries["checkpoints/model.pt"].reason == "model.pt is odd: second line"


def test_a_hub_id_without_a_network_says_what_to_do(monkeypatch, tmp_path, capsys):
    """HF_HUB_OFFLINE unset, as it mostly is: the download fails and the line said only
    "offline, or no such model"; it now gives the fix the offline setting's line gives."""
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    monkeypatch.chdir(tmp_path)
    line = one_error("translate", ["--checkpoint", "Helsinki-NLP/opus-mt-en-fr", "hi ."], capsys)
    assert "could not be downloaded" in line and "save_pretrained and pass the folder" in line
