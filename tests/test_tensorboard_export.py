"""A run exported as a TensorBoard log folder, read back with TensorBoard's own reader."""

from __future__ import annotations

import io
import json
import socket
import zipfile

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from core.attention.sentence_maps import SentenceMaps
from core.export_tensorboard import main
from core.figures.tensorboard import (
    HIGH,
    IMAGE_PIXELS,
    IMAGE_STEPS,
    export_tensorboard,
    map_image,
    tensorboard_zip,
)
from core.places import runs_root
from core.runs.run_dir import RunDir
from tests.test_app_train import train_page

EVERYTHING = {"images": 0, "scalars": 0, "histograms": 0, "tensors": 0}  # keep every event


def read_back(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance=EVERYTHING)
    events.Reload()
    return events


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("tb") / "log"
    return out, export_tensorboard(tiny_run, out), read_back(out)


def test_scalars_are_every_number_of_every_record(tiny_run, exported):
    _, done, events = exported
    records = RunDir(tiny_run).read_metrics()
    train = [r for r in records if r["record"] == "train"]
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in train]
    assert np.allclose([e.value for e in loss], [r["loss"] for r in train], rtol=1e-6)
    assert [e.wall_time for e in loss] == pytest.approx([r["time"] for r in train])
    epochs = events.Scalars("eval/epoch")
    assert [e.value for e in epochs] == pytest.approx(
        [r["epoch"] for r in records if r["record"] == "eval"], rel=1e-6
    )
    assert done["scalars"] == sum(len(events.Scalars(t)) for t in events.Tags()["scalars"])


def test_distributions_are_the_logged_histograms(tiny_run, exported):
    _, done, events = exported
    evals = [r for r in RunDir(tiny_run).read_metrics() if "distributions" in r]
    for which in ("weights", "grads"):
        logged = evals[-1]["distributions"][which]["encoder 0"]
        h = events.Histograms(f"{which}/encoder 0")[-1]
        assert h.step == evals[-1]["step"]
        assert h.histogram_value.num == logged["num"] == sum(h.histogram_value.bucket)
        assert list(h.histogram_value.bucket) == logged["counts"]
        assert h.histogram_value.min == logged["percentiles"][0]
        assert h.histogram_value.bucket_limit[-1] == pytest.approx(logged["percentiles"][-1])
    assert done["histograms"] == len(evals) * sum(
        len(evals[0]["distributions"][w]) for w in ("weights", "grads")
    )


def test_each_probes_maps_are_images_at_up_to_ten_snapshots(tiny_run, exported):
    out, done, events = exported
    rd = RunDir(tiny_run)
    steps = rd.snapshot_steps()
    probes = rd.load_snapshot(steps[-1])["probes"]
    tags = events.Tags()["images"]
    assert len(tags) == 3 * len(probes) and done["images"] == len(tags) * min(len(steps), 10)
    last = events.Images("maps/probe 1/cross")[-1]
    assert last.step == steps[-1]
    drawn = np.asarray(Image.open(io.BytesIO(last.encoded_image_string)).convert("RGB"))
    expected, averaged = map_image(SentenceMaps.from_probe(probes[0]).weights("cross"))
    assert not averaged and np.array_equal(drawn, expected)
    sentences = events.Tensors("probe sentences/text_summary")[0].tensor_proto.string_val[0]
    assert probes[0]["sentence"] in sentences.decode()
    assert done["left_out"] == {}
    (name,) = [p.name for p in out.iterdir()]
    assert name == done["events_file"] and socket.gethostname() not in name


def test_past_the_limit_images_are_left_out_and_counted(tiny_run, tmp_path):
    whole = export_tensorboard(tiny_run, tmp_path / "whole")
    limit = whole["bytes"] - 1500  # room for everything but a few images
    done = export_tensorboard(tiny_run, tmp_path / "small", limit=limit)
    assert done["bytes"] <= limit
    assert done["scalars"] == whole["scalars"] and done["histograms"] == whole["histograms"]
    assert 0 < done["left_out"]["images past the limit"] == whole["images"] - done["images"]
    assert len(read_back(tmp_path / "small").Tags()["images"]) > 0


def test_a_map_image_is_white_at_zero_blue_at_one_and_capped_in_pixels():
    weights = np.zeros((2, 3, 4, 5), dtype=np.float32)
    weights[1, 2, 3, 4] = 1.0
    image, averaged = map_image(weights)
    assert not averaged and image.shape[2] == 3 and (image[0, 0] == 255).all()
    assert (image[-1, -1] == HIGH).all()  # the last layer's last head, its last cell
    big = np.random.default_rng(0).random((24, 64, 50, 50), dtype=np.float32)
    image, averaged = map_image(big)
    assert averaged and image.shape[0] * image.shape[1] <= IMAGE_PIXELS


def test_the_zip_unpacks_into_a_log_folder_with_its_summary(tiny_run):
    z = zipfile.ZipFile(io.BytesIO(tensorboard_zip(tiny_run, "tiny")))
    names = sorted(z.namelist())
    rd = RunDir(tiny_run)
    probes = len(rd.load_snapshot(rd.snapshot_steps()[-1])["probes"])
    done = json.loads(z.read("tiny/export.json"))
    assert done["images"] == 3 * probes * min(len(rd.snapshot_steps()), IMAGE_STEPS)
    assert names == sorted(["tiny/export.json", f"tiny/{done['events_file']}"])


def test_the_command_prints_one_line_and_refuses_what_it_cannot_use(tiny_run, tmp_path, capsys):
    assert main([str(tiny_run), "--out", str(tmp_path / "tb"), "--no-images"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["images"] == 0 and line["scalars"] > 0
    assert main([str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    assert "neither a run directory" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main([str(tiny_run), "--out", str(tmp_path / "file")]) == 2
    assert main([str(tiny_run), "--out", str(tmp_path / "y"), "--limit-mb", "0"]) == 2


def test_text_a_user_typed_shows_as_typed(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.create()
    rd.write_config({"train": {"probes": ["<b>bold</b> **x**"]}})
    rd.append_metrics({"record": "train", "step": 1, "loss": 2.0, "time": 1.7e9})
    export_tensorboard(rd.path, tmp_path / "tb")
    text = read_back(tmp_path / "tb").Tensors("settings/text_summary")[0]
    lines = text.tensor_proto.string_val[0].decode().splitlines()
    assert all(line.startswith("    ") for line in lines)  # a Markdown code block: literal


def test_the_train_page_offers_the_tensorboard_log(jobs_env, make_run):
    rd = make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    rd.append_metrics({"record": "train", "step": 1, "loss": 2.0})
    at = train_page("done")
    assert "TensorBoard log" in [b.proto.label for b in at.get("download_button")]


def test_the_help_names_the_size_limit_s_default():
    from core.export_tensorboard import build_parser

    helped = " ".join(build_parser().format_help().split())
    assert "largest size in MB (default: 48;" in helped
