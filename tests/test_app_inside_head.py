"""AppTest tests of the Attention page's "Inside a head" and "Logit lens" sections."""

from __future__ import annotations

import shutil

import pytest

from core.runs.catalogue import SHIPPED_NAME
from tests.helpers import assert_clean, plain
from tests.test_app_attention import query, run_page, specs, title, titles

HOME = "i'm home ."  # the tiny model: je suis chez moi . <eos>


def lines_ends(spec: dict) -> list[int]:
    """The key rows the lines view's lines end at."""
    return [y for t in spec["data"] if t.get("mode") == "lines" for y in t["y"][1::3]]


def test_inside_a_head_shows_qk_scores_and_lines(studio_dirs):
    at = run_page({"section": "inside", "kind": "decoder_self", "layer": "1", "head": "2"})
    assert_clean(at)
    vectors, scores, lines = specs(at)
    assert title(vectors) == "Decoder self-attention, layer 1, head 2: query 0 (je)"
    assert vectors["layout"]["yaxis2"]["title"]["text"] == "earlier output token (key)"
    masks = [t for t in scores["data"] if t["type"] == "heatmap"][0]["text"]
    # step 0 reads only <bos>: its one open key says so, never "yes" under a "mask" title
    assert [m[0] for m in masks] == ["open"] + ["masked"] * 5
    assert title(lines) == "Decoder self-attention, layer 1, head 2"
    assert query(at)["section"] == "inside" and "query" not in query(at)  # 0: the default
    at.selectbox(key="at_query").set_value(3).run()
    assert_clean(at)
    assert titles(at)[0].endswith("query 3 (moi)") and query(at)["query"] == "3"


def test_the_query_and_lines_mode_come_back_from_the_url(studio_dirs):
    at = run_page({"section": "inside", "query": "2", "lines_all": "1", "token": "k1"})
    assert_clean(at)
    assert at.selectbox(key="at_query").value == 2
    assert at.toggle(key="at_lines_all").value is True
    lines = specs(at)[2]
    assert title(lines) == "Cross attention, layer 0, all 4 heads"
    assert set(lines_ends(lines)) == {1}  # only the lines into key 1 ("home")
    names = {t["name"] for t in lines["data"] if t.get("showlegend")}
    assert names == {f"head {h}" for h in range(4)}  # one legend entry (colour) per head
    assert query(at)["token"] == "k1" and query(at)["lines_all"] == "1"


def test_a_mean_head_shows_head_0_and_says_so(studio_dirs):
    at = run_page({"section": "inside", "head": "mean", "query": "99"})
    assert_clean(at)
    assert any("head 0 is shown" in c.value for c in at.caption)
    assert titles(at)[0] == "Cross attention, layer 0, head 0: query 5 (&lt;eos&gt;)"


def test_the_section_fields_leave_the_url_with_their_section(studio_dirs):
    at = run_page({"section": "inside", "query": "2"})
    at.radio(key="at_section").set_value("maps").run()
    assert_clean(at)
    assert "query" not in query(at) and "section" not in query(at)


def test_the_logit_lens_says_what_it_projects(studio_dirs):
    at = run_page({"section": "lens"})
    assert_clean(at)
    (lens,) = specs(at)
    assert lens["layout"]["yaxis"]["ticktext"] == ["je", "suis", "chez", "moi", ".", "&lt;eos&gt;"]
    assert [row[-1] for row in lens["data"][0]["text"]] == lens["layout"]["yaxis"]["ticktext"]
    words = plain(" ".join(c.value for c in at.caption))
    assert "after its last AddNorm" in words and "decoder.dense" in words and "post-LN" in words
    at.radio(key="at_lens").set_value("rank").run()
    assert_clean(at)
    assert query(at)["lens"] == "rank"
    assert specs(at)[0]["data"][0]["colorbar"]["title"]["text"] == "rank of chosen"


def test_the_logit_lens_shows_no_kind_layer_or_head_it_would_not_read(studio_dirs):
    at = run_page({"section": "lens", "kind": "encoder", "layer": "1", "head": "2"})
    assert_clean(at)
    keys = {w.key for w in [*at.radio, *at.selectbox]}
    assert not keys & {"at_kind", "at_layer", "at_head"}  # nothing that would do nothing
    at.radio(key="at_section").set_value("maps").run()  # back: the view as it was
    assert_clean(at)
    assert at.radio(key="at_kind").value == "encoder"
    assert (at.selectbox(key="at_layer").value, at.selectbox(key="at_head").value) == (1, "2")
    at.radio(key="at_section").set_value("lens").run()  # and away again, from the picker
    assert "at_kind" not in {w.key for w in at.radio}


@pytest.fixture
def bpe_dirs(tmp_path, bpe_run, monkeypatch):
    """The app sees the tiny BPE model as its only checkpoint."""
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    shutil.copy(bpe_run / "last.pt", ckpts / SHIPPED_NAME)
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(ckpts))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))


@pytest.mark.parametrize("section", ["inside", "lens"])
def test_a_bpe_model_shows_its_pieces(bpe_dirs, section):
    at = run_page({"section": section, "sentence": "the cat sees the dog .", "words": "1"})
    assert_clean(at)
    assert not at.error and specs(at)
    if section == "inside":
        assert at.selectbox(key="at_query").options  # the model's own pieces
