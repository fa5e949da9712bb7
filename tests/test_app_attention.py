"""AppTest tests of the Attention page (run on its own, without app.py)."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
from streamlit.testing.v1 import AppTest

from core.attention.kinds import KINDS, kind_labels
from core.attention.maps import HIDDEN_NOTE, export_name
from core.figures.attention import BLANK_NAME, plotly_text
from core.figures.head_roles import ROLES_TITLE as ROLES
from pages.ui.attention.sections import SECTION_KEYS
from pages.ui.view_state import OLD_SECTIONS
from tests.helpers import assert_clean, plain, run_page_script


def run_page(query: dict | None = None) -> AppTest:
    """Run the page once (with URL query parameters) and return the test app."""
    return run_page_script("attention.py", query)


def specs(at: AppTest) -> list[dict]:
    """The Plotly figures of the page, as JSON, but the Maps' head roles (one per attention
    kind, after the maps: tests/test_head_roles.py reads them)."""
    every = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return [f for f in every if not f["layout"].get("title", {}).get("text", "").startswith(ROLES)]


def titles(at: AppTest) -> list[str]:
    """The titles of the page's charts, their line breaks read as spaces."""
    return [title(s) for s in specs(at)]


def title(spec: dict) -> str:
    """A chart's title with its line breaks read as spaces."""
    return spec["layout"]["title"]["text"].replace("<br>", " ")


def subtitle(spec: dict) -> str:
    """A chart's subtitle with its line breaks read as spaces."""
    return spec["layout"]["title"]["subtitle"]["text"].replace("<br>", " ")


def png_names(at: AppTest) -> list[str]:
    """The file names the charts' toolbars save PNGs under."""
    configs = [json.loads(c.proto.config) for c in at.get("plotly_chart")]
    return [c["toImageButtonOptions"]["filename"] for c in configs]


def query(at: AppTest) -> dict:
    """The page's URL query parameters as a plain dict."""
    return {k: at.query_params[k] for k in at.query_params}


def json_z(z):
    """A heatmap's z as a list of rows (Plotly may encode arrays as typed binary data)."""
    if isinstance(z, dict):
        flat = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        shape = [int(n) for n in str(z.get("shape", len(flat))).split(",")]
        return flat.reshape(shape)
    return z


def test_renders_large_heatmap_and_overview(studio_dirs):
    at = run_page()
    assert_clean(at)
    big, grid = specs(at)
    assert title(big).startswith("Cross attention (decoder → encoder)")
    assert big["layout"]["yaxis"]["title"]["text"] == "output token (query)"
    assert big["layout"]["xaxis"]["title"]["text"] == "source token (key)"
    assert big["layout"]["yaxis"]["ticktext"] == ["je", "suis", "chez", "moi", ".", "&lt;eos&gt;"]
    assert big["layout"]["xaxis"]["ticktext"] == ["i'm", "home", ".", "&lt;eos&gt;"]
    cells = next(t for t in big["data"] if t.get("name") == "cell")  # clickable, with the hover
    assert "query %{y}" in cells["hovertemplate"] and big["data"][0]["hoverinfo"] == "skip"
    assert len(grid["data"]) == 2 * 4  # every layer × head of the tiny model
    assert grid["layout"]["coloraxis"]["cmax"] == 1.0
    table = at.dataframe[0].value
    assert len(table) == 8 and "monotonicity" in table and "label" in table
    assert at.get("download_button")
    assert query(at) == {
        "model": "checkpoints/fra-eng-small.pt",
        "sentence": "i'm home .",
        "kind": "cross",
        "layer": "0",
        "head": "0",
    }
    assert not any("Tatoeba" in c.value for c in at.caption)  # trained on tiny.tsv: no credit


def test_switch_kind_layer_and_head(studio_dirs):
    at = run_page()
    at.radio(key="at_kind").set_value("encoder").run()
    assert titles(at)[0] == "Encoder self-attention (source → source) — layer 0, head 0"
    at.selectbox(key="at_layer").set_value(1).run()
    at.selectbox(key="at_head").set_value("rollout").run()
    assert_clean(at)
    assert "rollout through layers 0–1" in titles(at)[0]
    at.radio(key="at_kind").set_value("decoder_self").run()
    assert_clean(at)
    assert at.selectbox(key="at_head").value == "0"  # rollout is for the encoder only
    assert "rollout" not in at.selectbox(key="at_head").options
    at.selectbox(key="at_head").set_value("max").run()
    big = specs(at)[0]
    assert title(big).endswith("layer 1, max over 4 heads")
    assert big["layout"]["xaxis"]["title"]["text"] == "earlier output token (key)"
    assert query(at)["kind"] == "decoder_self" and query(at)["head"] == "max"
    assert query(at)["layer"] == "1"


def test_view_is_restored_from_the_url(studio_dirs):
    at = run_page({"sentence": "go .", "kind": "encoder", "layer": "1", "head": "3", "hide": "1"})
    assert_clean(at)
    assert at.radio(key="at_kind").value == "encoder"
    assert (at.selectbox(key="at_layer").value, at.selectbox(key="at_head").value) == (1, "3")
    assert at.toggle(key="at_hide").value is True
    big = specs(at)[0]
    assert title(big).endswith("layer 1, head 3")
    assert big["layout"]["xaxis"]["ticktext"] == ["go", "."]


def test_hiding_specials_renormalises_and_says_so(studio_dirs):
    at = run_page()
    at.toggle(key="at_hide").set_value(True).run()
    assert_clean(at)
    big, grid = specs(at)
    assert plotly_text(HIDDEN_NOTE) in subtitle(big) and plotly_text(HIDDEN_NOTE) in subtitle(grid)
    assert "<eos>" not in big["layout"]["xaxis"]["ticktext"]
    assert query(at)["hide"] == "1"


def test_a_heads_label_and_statistics_do_not_flip_with_the_hide_toggle(studio_dirs):
    """Issue 53, item 1: a diagonal decoder-self head read "previous 1.00 — sub-diagonal" with
    <bos>/<eos> hidden, because hiding shifted the columns under the statistic."""
    query = {"sentence": "i am cold .", "kind": "decoder_self"}
    seen = {}
    for hide in ("0", "1"):
        at = run_page({**query, "hide": hide})
        assert_clean(at)
        table = at.dataframe[-1].value
        seen[hide] = (
            table.to_dict("list"),
            [m.value for m in at.markdown if m.value.startswith("**")],
        )
        assert not table.isna().any().any()  # every statistic measured, none "None"
    assert seen["0"] == seen["1"]
    assert any("full map" in c.value for c in run_page({**query, "hide": "1"}).caption)


def test_hidden_bos_leaves_step_zero_blank_and_says_why(studio_dirs):
    """Decoder self-attention, <bos> hidden: step 0 read only <bos>, so its row is blank."""
    at = run_page({"kind": "decoder_self", "hide": "1"})
    assert_clean(at)
    big, grid = specs(at)
    weights = [t for t in grid["data"] if t.get("name") != BLANK_NAME]
    for fig in (big, *[{"data": [t]} for t in weights]):
        z = np.asarray(json_z(fig["data"][0]["z"]), dtype=float)
        assert np.isnan(z[0]).all() and not np.isnan(z[1:]).any()
    for fig in (big, grid):
        assert "row 0 (je) attends only to &lt;bos&gt;: left blank" in subtitle(fig)
    (caption,) = [c.value for c in at.caption if "Blank rows" in c.value]
    assert "nothing left to renormalise" in plain(caption)
    assert "row 0 (je) attends only to <bos>" in plain(caption)


def test_bad_input_gives_a_clear_message(studio_dirs):
    at = run_page({"sentence": "zorglub blorp"})
    assert_clean(at)
    assert "None of these words" in at.error[0].value and not specs(at)
    at.text_input(key="at_sentence").set_value("").run()
    assert "empty" in at.error[0].value and not specs(at)
    at.text_input(key="at_sentence").set_value("go . " * 40).run()
    assert "at most 60" in at.error[0].value
    paste = ("go . " * 400)[:1538]  # pasted: kept whole, refused with its length
    assert not at.text_input(key="at_sentence").max_chars
    at.text_input(key="at_sentence").set_value(paste).run()
    assert "1,538 characters" in plain(at.error[0].value)
    assert at.text_input(key="at_sentence").value == paste
    at.text_input(key="at_sentence").set_value("go .").run()
    assert_clean(at)
    assert not at.error and len(specs(at)) == 2


def test_beam_search_from_the_url(studio_dirs):
    at = run_page({"beam": "3", "sentence": "he's calm ."})
    assert_clean(at)
    assert any("Translation (beam 3):** il est calme ." in plain(m.value) for m in at.markdown)
    assert query(at)["beam"] == "3"


def test_decoding_playback_matches_the_maps(studio_dirs, home_translation):
    at = run_page()
    at.radio(key="at_section").set_value("playback").run()
    at.slider(key="at_step").set_value(2).run()
    assert_clean(at)
    assert any("reads `suis`, produces **`chez`**" in m.value for m in at.markdown)
    cross, self_, topk, free, forced = specs(at)
    maps = home_translation[1]  # the same model and sentence, outside the page
    z = np.asarray(json_z(cross["data"][0]["z"]))
    np.testing.assert_allclose(z, maps.cross[0, :, 2], atol=1e-6)
    assert np.asarray(json_z(self_["data"][0]["z"])).shape == (4, 3)
    assert topk["data"][0]["y"][0] == "0:chez"
    # the book's reference is filled in: teacher-forced maps shown beside the free-running
    assert at.text_input(key="at_ref").value == "je suis chez moi ."
    assert "free-running" in title(free) and "teacher-forced" in title(forced)
    at.text_input(key="at_ref").set_value("je suis à la maison .").run()
    assert_clean(at)
    assert specs(at)[-1]["layout"]["yaxis"]["ticktext"][-3:] == ["maison", ".", "&lt;eos&gt;"]


def test_playback_section_and_step_travel_in_the_url(studio_dirs):
    at = run_page({"section": "playback", "step": "2"})
    assert_clean(at)
    assert at.radio(key="at_section").value == "playback"
    assert at.slider(key="at_step").value == 2
    assert any("reads `suis`, produces **`chez`**" in m.value for m in at.markdown)
    at.slider(key="at_step").set_value(3).run()
    assert (query(at)["section"], query(at)["step"]) == ("playback", "3")
    at.radio(key="at_section").set_value("maps").run()
    assert "section" not in query(at) and "step" not in query(at)
    at = run_page({"section": "Decoding playback", "step": "99"})  # past the end: the last step
    assert_clean(at)
    assert at.slider(key="at_step").value == 5 and query(at)["step"] == "5"


def test_every_section_key_has_a_label_and_a_view():
    from pages.ui.attention.sections import SECTIONS

    assert tuple(SECTIONS) == SECTION_KEYS  # the URL's keys, in the radio's order
    assert all(callable(section.draw) for section in SECTIONS.values())


def test_every_section_opens_from_its_key_and_from_its_old_label(studio_dirs):
    """Links made before the section keys carry the label shown then (section=Over+training)."""
    labels = [
        "Maps",
        "Decoding playback",
        "Over training",
        "Remove heads",
        "Compare",
        "Attribution",
        "Alignment",
        "Inside a head",
        "Logit lens",
        "Direct logit attribution",
        "Head scores",
        "Patching",
        "Where tokens live",
    ]
    assert run_page().radio(key="at_section").options == labels
    for label, key in OLD_SECTIONS.items():
        for value in (key, label):
            at = run_page({"section": value})
            assert_clean(at)
            assert at.radio(key="at_section").value == key
            assert query(at).get("section") == (None if key == "maps" else key)


def test_the_reference_travels_in_the_url(studio_dirs):
    at = run_page({"section": "playback"})
    assert at.text_input(key="at_ref").value == "je suis chez moi ."  # the d2l book's
    assert "reference" not in query(at)  # the default stays out of the URL
    at.text_input(key="at_ref").set_value("je suis à la maison .").run()
    assert query(at)["reference"] == "je suis à la maison ."
    again = run_page(query(at))  # a reload or a shared link
    assert_clean(again)
    assert again.text_input(key="at_ref").value == "je suis à la maison ."
    at.radio(key="at_section").set_value("maps").run()
    at.radio(key="at_section").set_value("playback").run()  # back: the box holds it again
    assert at.text_input(key="at_ref").value == "je suis à la maison ."
    at.text_input(key="at_sentence").set_value("go .").run()  # another sentence: its own
    assert_clean(at)
    assert at.text_input(key="at_ref").value == "va !" and "reference" not in query(at)


def test_playback_titles_are_short_with_the_token_below(studio_dirs):
    at = run_page({"section": "Decoding playback", "step": "2"})
    cross, self_ = specs(at)[:2]
    assert cross["layout"]["title"]["text"] == "Cross attention, layer 0"
    assert self_["layout"]["title"]["text"] == "Decoder self-attention, layer 0"
    assert "producing “chez”" in subtitle(cross) and "reading “suis”" in subtitle(self_)
    lines = [x for spec in specs(at) for x in spec["layout"]["title"]["text"].split("<br>")]
    assert all(len(line) <= 44 for line in lines)


def test_charts_and_csv_save_under_one_readable_name(studio_dirs):
    at = run_page({"kind": "decoder_self", "layer": "1", "head": "2"})
    assert_clean(at)
    name = "fra-eng-small_im-home_decoder-self_layer1_head2"
    assert name == export_name("checkpoints/fra-eng-small.pt", "i'm home .", "decoder_self", 1, 2)
    assert png_names(at)[:2] == [name, "fra-eng-small_im-home_decoder-self_grid"]
    assert png_names(at)[2:] == [  # then the head roles, one map per kind
        f"fra-eng-small_im-home_{kind}_all_roles" for kind in ("encoder", "decoder-self", "cross")
    ]
    at.radio(key="at_section").set_value("playback").run()
    assert png_names(at)[:3] == [
        f"fra-eng-small_im-home_layer1_step-0_{what}"
        for what in ("cross", "decoder-self", "candidates")
    ]


def test_markdown_in_a_reference_is_shown_literally(studio_dirs):
    at = run_page()
    at.radio(key="at_section").set_value("playback").run()
    at.text_input(key="at_ref").set_value("je suis **x** :red[y] $z$ <b>").run()
    assert_clean(at)
    (caption,) = [c.value for c in at.caption if "output vocabulary" in c.value]
    assert r"\*\*x\*\*\, \:red\[y\]\, \$z\$\, \<b\>" in caption
    assert plain(caption).endswith("(fed as <unk>): **x**, :red[y], $z$, <b>")


def test_attention_over_training(studio_dirs):
    at = run_page()
    at.radio(key="at_section").set_value("training").run()
    assert_clean(at)
    assert at.selectbox(key="at_probe").value == "i'm home ."
    assert at.select_slider(key="at_train_step").value == 150
    at.select_slider(key="at_train_step").set_value(50).run()
    assert_clean(at)
    assert [m.value for m in at.metric][0] == "50"
    assert at.metric[1].value != "—"  # the training loss at step 50
    big, curve, grid = specs(at)[:3]  # then the heads over training
    assert title(big).endswith("training step 50")
    assert curve["layout"]["shapes"][0]["x0"] == 50
    assert len(grid["data"]) == 8  # every layer × head of the tiny model, as it was at step 50


def test_over_training_without_a_history_says_so(studio_dirs):
    """A checkpoint whose run is gone and that has no ``.history`` beside it: the one line
    says what is missing on disk (capabilities.NO_HISTORY)."""
    shutil.rmtree(studio_dirs["runs"])
    at = run_page()
    at.radio(key="at_section").set_value("training").run()
    assert_clean(at)
    assert "no training history here" in at.info[0].value


def test_over_training_replays_a_models_history_file_without_its_run(studio_dirs):
    from core.runs.catalogue import SHIPPED_NAME
    from core.runs.history import write_history

    write_history(studio_dirs["run"], studio_dirs["checkpoints"] / SHIPPED_NAME)
    shutil.rmtree(studio_dirs["runs"])
    at = run_page()
    at.radio(key="at_section").set_value("training").run()
    assert_clean(at)
    assert not at.info
    assert at.select_slider(key="at_train_step").value == 150
    big, curve, grid = specs(at)[:3]  # then the heads over training
    assert title(big).endswith("training step 150") and curve["data"]


def test_no_model_points_to_the_train_page(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "none"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "none-either"))
    at = run_page()
    assert_clean(at)
    assert "Train page" in at.error[0].value and not specs(at)


def test_six_layers_by_eight_heads_stay_usable(studio_dirs, wide_checkpoint):
    shutil.copy(wide_checkpoint, studio_dirs["checkpoints"] / wide_checkpoint.name)
    at = run_page(
        {
            "model": "checkpoints/wide-6x8.pt",
            "max_len": "12",
            "layer": "5",
            "head": "7",
            "sentence": "the cat sees the dog and the dog sees the cat .",
        }
    )
    assert_clean(at)
    big, grid = specs(at)
    assert title(big).endswith("layer 5, head 7")
    assert len(grid["data"]) == 8  # one layer's heads by default
    at.toggle(key="at_all_layers").set_value(True).run()
    assert len(specs(at)[1]["data"]) == 48
    assert len(at.dataframe[0].value) == 48


def test_real_shipped_model(shipped_model_dirs):
    at = run_page({"sentence": "i'm home ."})
    assert_clean(at)
    assert at.selectbox(key="at_model").value == "checkpoints/fra-eng-small.pt"
    assert len(specs(at)) == 2
    for kind in KINDS:
        at.radio(key="at_kind").set_value(kind).run()
        assert_clean(at)
        assert titles(at)[0].startswith(kind_labels(kind)[0])


def test_a_model_newer_than_the_cached_list_opens_from_its_url(studio_dirs):
    """The model list is re-read every 5 s; a URL naming a model made since re-reads it."""
    at = run_page()  # caches the list without the new run
    assert_clean(at)
    shutil.copytree(studio_dirs["runs"] / "tiny", studio_dirs["runs"] / "brand-new")
    at = run_page({"model": "runs/brand-new/last.pt"})
    assert_clean(at)
    assert not [w for w in at.warning if "was not found" in w.value]
    assert at.selectbox(key="at_model").value == "runs/brand-new/last.pt"


def test_the_page_draws_the_figures_a_validated_build_gives(studio_dirs, monkeypatch):
    """The server builds its maps without Plotly's validation (core.figures.plain): the maps,
    heads removed, comparison and playback sections send the browser the same figures."""
    from core.figures import plain

    sections = (
        {"section": "maps"},
        {"section": "maps", "kind": "encoder", "hide": "1", "stretch": "1"},
        {"section": "ablation", "ablate": "cross:1:2,encoder:0:1"},
        {"section": "compare"},
        {"section": "playback", "step": "1"},
    )
    for query in sections:
        drawn = []
        for check in ("1", "0"):
            monkeypatch.setenv(plain.CHECK_ENV, check)
            at = run_page(query)
            assert_clean(at)
            drawn.append(specs(at))
        assert drawn[0] and drawn[0] == drawn[1], query


def test_the_training_loss_says_it_is_smoothed_where_the_validation_loss_is_not():
    """Issue 53, item 5: "Training loss 1.815 / Validation loss 0.972" side by side, unexplained
    (the shipped model trained with label smoothing 0.1)."""
    from pages.ui.attention.over_training_view import training_loss_words

    shipped = {"train_config": {"label_smoothing": 0.1}, "model_config": {"dropout": 0.0}}
    words = training_loss_words(shipped)
    assert "label smoothing 0.1" in words and "dropout" not in words.split("(")[0]
    assert "plain cross-entropy" in words
    both = {"train_config": {"label_smoothing": 0.1}, "model_config": {"dropout": 0.2}}
    assert "label smoothing 0.1 and dropout 0.2" in training_loss_words(both)
    assert training_loss_words({"train_config": {"label_smoothing": 0.0}}) is None


def test_the_training_loss_words_give_each_setting_its_own_reason():
    """Issue 69, item 6: a run with dropout 0.2 and no label smoothing read "with dropout 0.2
    (a smoothed loss stays well above…)"."""
    from pages.ui.attention.over_training_view import training_loss_words

    dropout = {"train_config": {"label_smoothing": 0.0}, "model_config": {"dropout": 0.2}}
    words = training_loss_words(dropout)
    assert "with dropout 0.2 (dropout drops part of the model" in words
    assert "smooth" not in words and "label smoothing" not in words
    smoothing = {"train_config": {"label_smoothing": 0.1}, "model_config": {"dropout": 0.0}}
    assert "dropout drops" not in training_loss_words(smoothing)
    both = {"train_config": {"label_smoothing": 0.1}, "model_config": {"dropout": 0.2}}
    assert "smoothed loss stays" in training_loss_words(both)
    assert "dropout drops" in training_loss_words(both)


def test_over_training_explains_the_training_loss_of_a_smoothed_model(studio_dirs):
    from core.model.checkpoints import read_metadata
    from pages.ui.attention.over_training_view import training_loss_words

    at = run_page()
    at.radio(key="at_section").set_value("training").run()
    assert_clean(at)
    meta = read_metadata(studio_dirs["checkpoints"] / "fra-eng-small.pt")
    expected = training_loss_words(meta)
    assert at.metric[1].proto.help == (expected or "")


def test_over_training_says_when_it_shows_a_probe_instead_of_the_typed_sentence(studio_dirs):
    """Issue 53, item 8: Over training silently showed a probe sentence, not the typed one."""
    at = run_page({"sentence": "she is tall ."})
    at.radio(key="at_section").set_value("training").run()
    assert_clean(at)
    assert any("is not among the sequences this run recorded" in plain(c.value) for c in at.caption)
    at = run_page({"sentence": at.selectbox(key="at_probe").value})
    at.radio(key="at_section").set_value("training").run()
    assert not any("this run recorded, so" in plain(c.value) for c in at.caption)
