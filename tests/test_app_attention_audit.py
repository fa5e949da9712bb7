"""AppTest tests of what a new-user audit found in the Attention page's sections: Compare's
model B of the other direction, Alignment's layer and head menus under "Mean of all layers",
Patching's example sentences, the head-roles caption, and model labels without a direction."""

from __future__ import annotations

from pathlib import Path

from core.runs import catalogue as models
from tests.helpers import ROOT, assert_clean, plain, run_page_script
from tests.test_app_alignment import specs, title
from tests.test_app_attention_edges import reversed_copy


def test_compare_never_opens_on_a_model_of_the_other_direction(studio_dirs, tmp_path):
    """Model B of French→English fr-en-small-aligned.pt defaulted to English→French
    fra-eng-small.pt, which read "je suis chez moi ." as unknown words."""
    shipped = models.list_models(ROOT / "checkpoints", tmp_path / "no-runs")
    reverse = models.find_entry(shipped, "checkpoints/fr-en-small-aligned.pt")
    assert models.compared_entry(shipped, reverse, ("fr", "en")) is None  # the only fr→en one
    ckpts = studio_dirs["checkpoints"]
    reversed_copy(ckpts / "fra-eng-small.pt", ckpts / "fr-en.pt")
    query = {"model": "checkpoints/fr-en.pt", "section": "compare", "sentence": "je suis ."}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert at.selectbox(key="cmp_other").value is None
    said = [plain(i.value) for i in at.info]
    assert any("No other model translates French→English" in s and "two sentences" in s
               for s in said), said  # fmt: skip
    assert not at.get("plotly_chart")  # nothing compared until a model B is picked


def test_model_b_chosen_for_one_model_a_is_chosen_again_for_the_next(studio_dirs):
    """Review: model B, chosen by the page for an English→French A, stayed when A became the
    French→English model (B then read French as unknown words); a B the user picked stays."""
    ckpts = studio_dirs["checkpoints"]
    reversed_copy(ckpts / "fra-eng-small.pt", ckpts / "fr-en.pt")
    at = run_page_script("attention.py", {"section": "compare", "sentence": "i am cold ."})
    assert_clean(at)
    first = at.selectbox(key="cmp_other").value
    assert first is not None and first != "checkpoints/fr-en.pt"
    at.selectbox(key="at_model").set_value("checkpoints/fr-en.pt").run()
    assert_clean(at)
    assert at.selectbox(key="cmp_other").value is None  # no other French→English model
    assert any("No other model translates French→English" in plain(i.value) for i in at.info)
    at.selectbox(key="cmp_other").set_value(first).run()  # picked by hand: kept
    assert at.selectbox(key="cmp_other").value == first


def test_model_labels_say_the_direction(tmp_path):
    """fr-en-small-aligned.pt was labelled "fra-eng (Tatoeba)" like the English→French ones."""
    shipped = models.list_models(ROOT / "checkpoints", tmp_path / "no-runs")
    by_name = {Path(e.path).name: e for e in shipped}
    reverse, forward = by_name["fr-en-small-aligned.pt"], by_name["fra-eng-small.pt"]
    assert reverse.label.startswith("checkpoints/fr-en-small-aligned.pt · fr→en · ")
    assert forward.label.startswith("checkpoints/fra-eng-small.pt · en→fr · ")
    caption = "shipped model · fra-eng (Tatoeba), ≤12 tokens · fr→en · "
    assert models.entry_caption(reverse).startswith(caption)
    assert "fr→en" in models.models_frame([reverse])["data"][0]


def test_picking_a_layer_reads_it_under_the_mean_of_all_layers(studio_dirs):
    """Alignment said "Pick another layer and head in the view above", but with "Mean of all
    layers" ticked a new Layer or Head left the chart on the mean of all layers."""
    query = {"section": "alignment", "sentence": "the cat sees the dog .", "layer": "1"}
    at = run_page_script("attention.py", query | {"head": "2", "align_all": "1"})
    assert_clean(at)
    assert at.checkbox(key="al_all").value
    assert spec_title(at).endswith("— mean of all layers and heads")
    at.selectbox(key="at_layer").set_value(0).run()
    assert_clean(at)
    assert not at.checkbox(key="al_all").value
    assert spec_title(at).endswith("— layer 0, head 2")
    at.checkbox(key="al_all").check().run()  # ticked again, it stays ticked
    assert spec_title(at).endswith("— mean of all layers and heads")
    at.selectbox(key="at_head").set_value("mean").run()
    assert spec_title(at).endswith("— layer 0, mean of heads")


def spec_title(at) -> str:
    """The title of the page's first Plotly chart."""
    return title(specs(at)[0])


def test_patching_shows_its_example_sentences_as_code(studio_dirs):
    """The hint read "Type the corrupted sentence, e.g. \\`the girl is tall .\\` for …": the
    code spans were escaped into literal backticks."""
    at = run_page_script("attention.py", {"section": "patch", "sentence": "i am cold ."})
    assert_clean(at)
    (hint,) = [i.value for i in at.info if i.value.startswith("Type the corrupted sentence")]
    assert "\\`" not in hint and hint.count("`") == 4, hint


def test_a_layer_another_model_clamps_leaves_the_mean_ticked(monkeypatch):
    """Review: a Layer or Head the view clamped for a model with fewer layers (nothing picked)
    unticked "Mean of all layers"; only a pick on the same model does."""
    from types import SimpleNamespace

    from pages.ui.attention import alignment_view

    fake = SimpleNamespace(session_state={"al_all": True})
    monkeypatch.setattr(alignment_view, "st", fake)
    alignment_view.untick_mean_on_pick(SimpleNamespace(layer=5, head="2"), "six-layers.pt")
    alignment_view.untick_mean_on_pick(SimpleNamespace(layer=1, head="2"), "two-layers.pt")
    assert fake.session_state["al_all"]  # clamped on another model: still the mean
    alignment_view.untick_mean_on_pick(SimpleNamespace(layer=0, head="2"), "two-layers.pt")
    assert not fake.session_state["al_all"]  # picked: that layer is read
