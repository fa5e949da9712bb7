"""AppTest of the Attention page's "Remove heads" section (head ablation and importance)."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.model.checkpoints import atomic_save, read_checkpoint
from core.runs.catalogue import SHIPPED_NAME
from tests.helpers import ROOT, VAL_DATA, assert_clean, plain, run_page_script

SECTION = {"section": "Remove heads"}
CROSS = [f"Cross L{layer} H{head}" for layer in range(2) for head in range(4)]


@pytest.fixture
def val_dirs(studio_dirs):
    """The app's shipped model is the tiny one, its data settings holding 6 validation pairs."""
    path = studio_dirs["checkpoints"] / SHIPPED_NAME
    ckpt = read_checkpoint(path)
    ckpt["data_config"] = dict(VAL_DATA)
    atomic_save(ckpt, path)
    return studio_dirs


def run_page(query: dict | None = None) -> AppTest:
    """The Attention page on its "Remove heads" section (with more URL parameters)."""
    return run_page_script("attention.py", {**SECTION, **(query or {})})


def chart_specs(at: AppTest) -> list[dict]:
    """The page's Plotly figures as JSON, in page order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def array(values) -> np.ndarray:
    """A Plotly array as numpy (Plotly may encode arrays as typed binary data)."""
    if isinstance(values, dict):
        flat = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
        return flat.reshape([int(n) for n in str(values.get("shape", len(flat))).split(",")])
    return np.asarray(values, dtype=np.float32)


def z_of(spec: dict) -> np.ndarray:
    """The first heatmap's z."""
    return array(spec["data"][0]["z"])


def texts(at: AppTest) -> list[str]:
    """The page's Markdown, read as plain text."""
    return [plain(m.value) for m in at.markdown]


def translations(at: AppTest) -> dict[str, str]:
    """{"Original": ..., "8 heads removed": ...}: the section's two translation lines."""
    out = {}
    for text in texts(at):
        if text.startswith("**") and ":** " in text:
            title, words = text[2:].split(":** ", 1)
            out[title] = words
    return out


def test_picking_heads_translates_again_without_them(val_dirs):
    at = run_page()
    assert_clean(at)
    picker = at.multiselect(key="ab_heads")
    assert picker.value == [] and set(CROSS) <= set(picker.options)
    assert not at.metric  # nothing removed, nothing to compare yet
    at = picker.set_value(CROSS).run()
    assert_clean(at)
    shown = translations(at)
    assert shown["Original"] == "je suis chez moi ."
    assert shown["8 heads removed"] != shown["Original"]
    assert [m.label for m in at.metric] == ["log-probability", "log-probability"]
    assert at.query_params["ablate"] == ",".join(
        f"cross:{layer}:{head}" for layer in range(2) for head in range(4)
    )
    original, removed, grid = chart_specs(at)[:3]
    assert original["layout"]["title"]["text"].startswith("Original: Cross attention")
    assert removed["layout"]["title"]["text"].startswith("8 heads removed: Cross attention")
    assert z_of(original).shape != z_of(removed).shape or not np.allclose(
        z_of(original), z_of(removed)
    )
    assert len([t for t in grid["data"] if t["type"] == "heatmap"]) == 2 * 4
    assert any("This head is removed" in c.value for c in at.caption)


def test_heads_in_the_link_are_preselected(val_dirs):
    at = run_page({"ablate": "cross:1:2,encoder:0:1"})
    assert_clean(at)
    assert at.multiselect(key="ab_heads").value == ["Encoder self L0 H1", "Cross L1 H2"]
    assert "2 heads removed" in translations(at)


def test_a_one_attention_models_removed_head_is_marked_in_every_kind(studio_dirs):
    """A decoder-only model's three kinds are blocks of its one attention: Decoder self L1 H1
    removed is the cross view's L1 H1 too, which said "removed here: none"."""
    shutil.copytree(
        ROOT / "checkpoints" / "fra-eng-decoder.hf", studio_dirs["checkpoints"] / "d.hf"
    )
    query = {"model": "checkpoints/d.hf/", "ablate": "decoder_self:1:1", "layer": "1", "head": "1"}
    for kind in ("decoder_self", "cross", "encoder"):
        at = run_page(query | {"kind": kind})
        assert_clean(at)
        said = [plain(m.value) for m in at.markdown if "removed here" in m.value]
        assert said and said[0].endswith("Decoder self L1 H1"), (kind, said)
        assert any("This head is removed" in plain(c.value) for c in at.caption), kind


@pytest.mark.parametrize(
    "spec, words",
    [
        ("cross:9:0", "this model has 2 decoder layers"),
        ("attn:0:0", "Unknown attention kind"),
        ("cross:0", "is not KIND:LAYER:HEAD"),
        ("<b>x</b>:0:0", "Unknown attention kind"),
    ],
)
def test_bad_heads_in_the_link_are_a_message(val_dirs, spec, words):
    at = run_page({"ablate": spec})
    assert_clean(at)
    assert any(words in plain(w.value) for w in at.warning)
    assert at.multiselect(key="ab_heads").value == []


def test_head_importance_is_computed_shown_cached_and_used(val_dirs):
    at = run_page()
    assert not chart_specs(at)  # no heads removed, importance not computed yet
    at = at.button(key="ab_compute").click().run()
    assert_clean(at)
    specs = chart_specs(at)
    titles = [s["layout"]["title"]["text"].replace("<br>", " ") for s in specs]
    assert titles[:5] == [
        "Change in BLEU with the head removed",
        "Change in loss with the head removed",
        "Gradient importance score (Michel et al. 2019)",
        "Gradient score vs real effect",
        "Pruning curve",
    ]
    bleu_grid = specs[0]
    axis = bleu_grid["layout"]["coloraxis"]
    assert axis["cmin"] == -axis["cmax"] and axis["colorscale"]  # diverging, centred at 0
    assert len(bleu_grid["data"]) == 3  # one layer × head grid per attention kind
    assert "baseline BLEU" in bleu_grid["layout"]["title"]["subtitle"]["text"]
    assert "Spearman" in specs[3]["layout"]["title"]["subtitle"]["text"]
    fractions = array(specs[4]["data"][0]["x"])
    assert len(fractions) == 2 * 4 * 3 + 1 and fractions[0] == 0 and fractions[-1] == 1
    assert any(b.label == "Importance table as CSV" for b in at.get("download_button"))
    at.number_input(key="ab_least").set_value(3)
    at = at.button(key="ab_remove").click().run()
    assert_clean(at)
    assert len(at.multiselect(key="ab_heads").value) == 3
    assert "3 heads removed" in translations(at)
    again = run_page()  # a new session: the result comes from the disk cache
    assert_clean(again)
    assert any("read from the disk cache" in t for t in texts(again))
    assert "ab_compute" not in [b.key for b in again.button]
    assert len(chart_specs(again)) == 5


def test_a_second_head_importance_waits_in_line_then_says_to_come_back(val_dirs):
    """While another session computes, a click waits in line (here 0.3 s), then says so."""
    from tests.helpers import heavy_slot_held

    with heavy_slot_held():  # another session's computation holds the slot
        at = run_page()
        at = at.button(key="ab_compute").click().run()
        assert_clean(at)
        assert any("one runs at a time" in w.value for w in at.warning)
        assert not chart_specs(at)
    at = run_page().button(key="ab_compute").click().run()  # free again: it computes
    assert chart_specs(at)
