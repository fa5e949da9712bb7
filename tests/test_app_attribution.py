"""AppTest of the Attention page's "Attribution" section (token attribution, faithfulness)."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.attribution.faithfulness import DEFAULT_METHODS, RANDOM, faithfulness_for
from core.attribution.methods import METHOD_NAMES
from core.model.studio_model import StudioModel
from core.runs.catalogue import SHIPPED_NAME
from tests.helpers import assert_clean, plain, run_page_script, with_validation_split

SECTION = {"section": "attribution"}
SENTENCE = "the cat sees the dog ."  # "the" twice; the tiny model: "le chat voit le chien ."


@pytest.fixture
def val_dirs(studio_dirs):
    """The app's shipped model is the tiny one, its data settings holding 6 validation pairs."""
    path = studio_dirs["checkpoints"] / SHIPPED_NAME
    with_validation_split(path, path)
    return studio_dirs


def run_page(query: dict | None = None) -> AppTest:
    """The Attention page on its "Attribution" section (with more URL parameters)."""
    return run_page_script("attention.py", {**SECTION, **(query or {})})


def specs(at: AppTest) -> list[dict]:
    """The page's Plotly figures as JSON, in page order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def array(values) -> np.ndarray:
    """A Plotly array as numpy (Plotly may encode arrays as typed binary data)."""
    if isinstance(values, dict):
        flat = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
        return flat.reshape([int(n) for n in str(values.get("shape", len(flat))).split(",")])
    return np.asarray([np.nan if v is None else v for v in np.ravel(values)], dtype=float)


def z_of(spec: dict) -> np.ndarray:
    """The first heatmap's z as floats (None read as NaN)."""
    z = spec["data"][0]["z"]
    if isinstance(z, dict):
        return array(z).astype(float)
    return np.asarray([[np.nan if v is None else v for v in row] for row in z], dtype=float)


def title(spec: dict) -> str:
    """A chart's title with its line breaks read as spaces."""
    return spec["layout"]["title"]["text"].replace("<br>", " ")


def query(at: AppTest) -> dict:
    """The page's URL query parameters as a plain dict."""
    return {k: at.query_params[k] for k in at.query_params}


def faithfulness_table(at):
    """The faithfulness table (a "method" column), or None (the step scores are another)."""
    found = [d.value for d in at.dataframe if "method" in d.value.columns]
    return found[0] if found else None


def test_attention_beside_contributions_and_source_shares(studio_dirs):
    at = run_page({"sentence": SENTENCE})
    assert_clean(at)
    attention, matrix, shares = specs(at)[:3]
    assert title(attention).startswith("Cross attention (decoder → encoder)")
    assert title(matrix).startswith(METHOD_NAMES["alti"])  # the default method
    source = ["the", "cat", "sees", "the", "dog", ".", "&lt;eos&gt;"]
    prefix = ["&lt;bos&gt;", "le", "chat", "voit", "le", "chien", "."]
    x = matrix["layout"]["xaxis"]
    assert x["ticktext"] == source + prefix and len(set(x["tickvals"])) == len(source + prefix)
    (line,) = matrix["layout"]["shapes"]
    assert line["x0"] == len(source) - 0.5  # the divider between source and prefix
    z = z_of(matrix)  # (T, S + T)
    assert np.isnan(z[0, len(source) + 1 :]).all() and np.allclose(np.nansum(z, 1), 1, atol=1e-4)
    assert len(array(shares["data"][0]["y"])) == len(prefix)
    assert any("Dale et al. (2023)" in c.value for c in at.caption)
    labels = [b.label for b in at.get("download_button")]
    assert "Contributions as CSV" in labels
    assert query(at)["section"] == "attribution" and "method" not in query(at)  # the default


def test_the_method_travels_in_the_url_and_changes_the_matrix(studio_dirs):
    at = run_page({"sentence": SENTENCE, "method": "grad-input"})
    assert_clean(at)
    assert at.selectbox(key="atr_method").value == "grad-input"
    before = z_of(specs(at)[1])
    at.selectbox(key="atr_method").set_value("value-zeroing").run()
    assert_clean(at)
    assert query(at)["method"] == "value-zeroing"
    assert title(specs(at)[1]).startswith("Value zeroing")
    assert not np.allclose(np.nan_to_num(before), np.nan_to_num(z_of(specs(at)[1])))
    again = run_page(query(at))  # a reload or a shared link
    assert_clean(again)
    assert again.selectbox(key="atr_method").value == "value-zeroing"
    at.radio(key="at_section").set_value("maps").run()
    assert "method" not in query(at)  # it means something in this section only
    bad = run_page({"method": "<b>bogus</b>"})
    assert_clean(bad)
    assert bad.selectbox(key="atr_method").value == "alti" and "method" not in query(bad)


def test_raw_attention_follows_the_view_and_says_when_it_cannot(studio_dirs):
    at = run_page({"sentence": SENTENCE, "method": "attention", "layer": "1", "head": "2"})
    assert_clean(at)
    attention, matrix = specs(at)[:2]
    assert title(matrix) == "Raw cross-attention — layer 1, head 2"
    S = len(attention["layout"]["xaxis"]["ticktext"])
    assert np.allclose(z_of(matrix)[:, :S], z_of(attention), atol=1e-6)  # the same weights
    assert not any("This section reads cross attention" in c.value for c in at.caption)
    at = run_page({"method": "attention", "kind": "encoder", "layer": "1", "head": "rollout"})
    assert_clean(at)
    assert title(specs(at)[1]) == "Raw cross-attention — layer 1, mean of heads"
    assert "layer 1, mean over 4 heads" in title(specs(at)[0])
    (note,) = [plain(c.value) for c in at.caption if "reads cross attention" in plain(c.value)]
    assert "Encoder self attention, layer 1, rollout" in note


def test_a_cached_faithfulness_result_is_shown_as_a_table(val_dirs):
    path = val_dirs["checkpoints"] / SHIPPED_NAME
    measured = faithfulness_for(StudioModel.load(path), path, 200)  # 6 sentences: all there are
    at = run_page()
    assert_clean(at)
    assert "atr_measure" not in [b.key for b in at.button]
    table = faithfulness_table(at)
    assert list(table["method"]) == [r["name"] for r in measured.methods]
    rows = len(DEFAULT_METHODS) + 1  # the default methods and the random baseline
    assert "Random ranking (baseline)" in list(table["method"]) and len(table) == rows
    assert {"Spearman ρ", "ρ 95% low", "drop k=1", "drop k=3", "sentences"} <= set(table)
    assert any("read from the disk cache" in plain(m.value) for m in at.markdown)
    rho = measured.row(RANDOM)["spearman"]
    assert any(
        f"random ranking of the source words scores ρ = {rho:+.2f}" in c.value for c in at.caption
    )
    curve = [s for s in specs(at) if title(s) == "Deletion curve"][0]
    assert len(curve["data"]) == len(measured.methods)
    assert [t.get("line", {}).get("dash") for t in curve["data"]].count("dash") == 1
    labels = [b.label for b in at.get("download_button")]
    assert "Faithfulness table as CSV" in labels


def test_the_button_measures_faithfulness_with_a_progress_bar(val_dirs):
    at = run_page()
    at.number_input(key="atr_sentences").set_value(10).run()
    assert at.button(key="atr_measure").label == "Measure faithfulness on 10 validation sentences"
    at.toggle(key="atr_slow").set_value(True).run()
    assert any("Integrated gradients are slow" in w.value for w in at.warning)
    at.toggle(key="atr_slow").set_value(False).run()
    at = at.button(key="atr_measure").click().run()
    assert_clean(at)
    rows = len(DEFAULT_METHODS) + 1  # the default methods and the random baseline
    assert len(faithfulness_table(at)) == rows and "Deletion curve" in map(title, specs(at))
    assert any("measured in" in plain(m.value) for m in at.markdown)


def test_a_model_without_validation_sentences_says_so(studio_dirs):
    at = run_page().button(key="atr_measure").click().run()  # trained on all 30 pairs
    assert_clean(at)
    assert any("no validation sentences" in plain(e.value) for e in at.error)
    assert faithfulness_table(at) is None


def test_a_missing_corpus_is_a_message_without_a_button(val_dirs, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path))  # tiny.tsv is not there
    at = run_page()
    assert_clean(at)
    said = [i.value for i in at.info]  # calmly: nothing is broken, a file is missing
    assert any("Faithfulness cannot be measured for this model here" in i for i in said)
    assert "atr_measure" not in [b.key for b in at.button]
    assert "--data" not in " ".join(said)  # command-line advice kept aside


def test_a_bpe_model_merges_pieces_into_words_when_asked(studio_dirs, bpe_run):
    shutil.copytree(bpe_run, studio_dirs["runs"] / "bpe")
    view = {  # the output fixed (a tiny model's own may change with its threads' rounding)
        "model": "runs/bpe/last.pt",
        "sentence": "we are eating apples .",  # cut in pieces
        "target": "nous mangeons des pommes .",
    }
    pieces, words = run_page(view), run_page({**view, "words": "1"})
    assert_clean(pieces)
    assert_clean(words)
    cut, whole = (specs(at)[1]["layout"] for at in (pieces, words))
    assert any(t.startswith("##") for t in cut["xaxis"]["ticktext"])
    assert not any(
        t.startswith("##") for t in whole["xaxis"]["ticktext"] + whole["yaxis"]["ticktext"]
    )
    S = whole["xaxis"]["ticktext"].index("&lt;eos&gt;") + 1
    attention = specs(words)[0]["layout"]["xaxis"]["ticktext"]
    assert attention == whole["xaxis"]["ticktext"][:S]  # both panels read the same words
    z = z_of(specs(words)[1])  # (T', S' + T')
    T = len(whole["yaxis"]["ticktext"])
    split = [
        t for t, w in enumerate(whole["yaxis"]["ticktext"]) if w not in cut["yaxis"]["ticktext"]
    ]
    for t in split:  # a word cut in pieces read its own first pieces: that cell is not blank
        assert not np.isnan(z[t, S + t + 1]) and np.isnan(z[t, S + t + 2 :]).all()
    assert split and z.shape == (T, S + T)


def test_inseq_s_choices_on_the_page_equal_the_command_s_library_call(studio_dirs):
    """Issue 67, item 4: the new methods in the picker, spans and a contrast source read as
    data, their numbers those of ``sentence_json`` (what ``core.attribute`` prints)."""
    from core.attribution.explain import sentence_json
    from core.model.parts import DecodeSettings

    at = run_page({"sentence": SENTENCE, "method": "deeplift"})
    assert_clean(at)
    options = at.selectbox(key="atr_method").options
    assert {"Saliency", "DeepLIFT", "GradientSHAP"} <= set(options)
    assert title(specs(at)[1]).startswith("DeepLIFT")
    at.text_input(key="atr_source_spans").set_value("0:2").run()
    at.text_input(key="atr_target_spans").set_value("0:2").run()
    assert_clean(at)
    m = StudioModel.load(studio_dirs["checkpoints"] / SHIPPED_NAME)
    t = m.translate(SENTENCE, DecodeSettings())
    expected = sentence_json(m, t, "deeplift", spans=("0:2", "0:2"))
    z = z_of(specs(at)[1])  # the figure's matrix over the merged tokens
    assert z.shape == np.array(expected["contributions"]).shape
    assert np.allclose(np.nan_to_num(z), expected["contributions"], atol=1e-5)
    at.text_input(key="atr_source_spans").set_value("0:2,1:3").run()
    assert_clean(at)
    assert any("overlap" in e.value for e in at.error)
    at.text_input(key="atr_source_spans").set_value("").run()
    at.text_input(key="atr_contrast_source").set_value("<b>the dog</b> sees the cat .").run()
    assert_clean(at)
    other = "<b>the dog</b> sees the cat ."
    scores = sentence_json(m, t, "deeplift", contrast_source=other)["step_scores"]
    (table,) = [d for d in at.dataframe if "pcxmi" in d.value.columns]
    assert np.allclose(table.value["pcxmi"], scores["pcxmi"], atol=1e-6)
    assert np.allclose(table.value["logit"], scores["logit"], atol=1e-6)


@pytest.mark.parametrize(
    "key, what",
    [
        ("atr_contrast_source", "contrast source"),
        ("atr_source_spans", "source spans"),
        ("atr_target_spans", "output spans"),
    ],
)
def test_a_long_paste_in_a_box_is_named_not_dropped_without_a_word(studio_dirs, key, what):
    """Audit: these boxes had a browser-side limit (max_chars), which drops a longer paste
    whole, so the page's own one line (``bounded``) could never say why the box stayed empty."""
    at = run_page({"sentence": SENTENCE, "method": "grad-input"})
    box = at.text_input(key=key)
    assert not box.proto.max_chars  # no limit the browser enforces by dropping the paste
    box.set_value("x" * 5000).run()
    assert_clean(at)
    assert any(f"The {what} has 5,000 characters" in e.value for e in at.error)
