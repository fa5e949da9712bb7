"""AppTest tests of a decoder-only language model on the Translate and Attention pages: listed
by the picker with its size, translating by its prompt template (editable, kept in the URL),
its three blocks shown as maps, scored by Alignment, read by the logit lens, and one line
where a section cannot read it (``TranslationModel.supports``)."""

from __future__ import annotations

import shutil

import pytest

from pages.ui.attention.sections import SECTION_KEYS
from tests.helpers import assert_clean, plain, run_page_script


@pytest.fixture
def lm_dirs(studio_dirs, lm_models) -> dict:
    """The studio's folders with the tiny Llama and GPT-2 models under checkpoints/."""
    for family in ("llama", "gpt2"):
        shutil.copytree(lm_models[family], studio_dirs["checkpoints"] / family)
    return studio_dirs


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def test_the_translate_page_translates_by_the_prompt(lm_dirs):
    at = run_page_script("translate.py", {"model": "checkpoints/llama/", "sentence": "i am cold ."})
    assert_clean(at)
    labels = at.selectbox(key="tr_model").options
    assert any("checkpoints/llama/ · 4 heads · Hugging Face llama" in x for x in labels)
    assert (
        "llama · 0.03 M params · 32 wide · 2 layers · 4 heads (2 key/value heads) · rope"
        in texts(at)
    )
    assert at.text_area(key="tr_prompt").value == "English: {src}\nFrench:"
    assert "translates by prompting" in texts(at)
    at.text_area(key="tr_prompt").set_value("Translate: {src}\nIn French:").run()
    assert_clean(at)
    assert at.query_params["prompt"] == "Translate: {src}\nIn French:"
    at.text_area(key="tr_prompt").set_value("no slot here").run()
    assert "exactly once" in plain(at.error[0].value)
    assert at.text_area(key="tr_prompt").value == "no slot here"  # kept in the box
    at.text_area(key="tr_prompt").set_value("English: {src}\nFrench:" + "x" * 5000).run()
    assert_clean(at)  # audit: the box's own limit dropped such a paste, back to the default
    assert at.text_area(key="tr_prompt").proto.max_chars == 0
    assert "at most 300" in plain(" ".join(e.value for e in [*at.error, *at.warning]))
    long = "English: {src}\nFrench:" + "x" * 400  # a link's template past the box's limit
    at = run_page_script("translate.py", {"model": "checkpoints/llama/", "prompt": long})
    assert_clean(at)
    assert "at most 300" in plain(at.warning[0].value)  # the link's note names it
    assert at.text_area(key="tr_prompt").value == "English: {src}\nFrench:"


@pytest.mark.parametrize("section", SECTION_KEYS)
def test_every_attention_section_shows_the_model_or_says_why_not(lm_dirs, lm_loaded, section):
    query = {"model": "checkpoints/llama/", "sentence": "the boy is tall .", "section": section}
    if section == "patch":  # one length in pieces; answers of one piece each
        query |= {"corrupt": "you are tall .", "patch_ask": "1"}
        query |= {"patch_answer": "the", "patch_wrong": "he"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    problem = lm_loaded["llama"].supports(section)
    if problem:
        assert plain(at.info[-1].value) == problem
    elif section == "maps":
        assert "one causal attention per layer" in texts(at) and at.get("plotly_chart")
        assert "What each head does" in texts(at) and "induction" in texts(at)
        assert at.toggle(key="at_hide").label == "Hide ⏎"  # the line end that ends the sentence
        at.toggle(key="at_hide").set_value(True).run()
        assert_clean(at)
    elif section == "alignment":
        assert "Links" in texts(at) and at.get("plotly_chart")
        assert "readers scored on" in texts(at)
    elif section == "inside":  # the whole sequence; RoPE, grouped-query attention said
        assert "rotated by their positions" in texts(at) and "heads 0, 1 read the same" in texts(at)
        assert len(at.get("plotly_chart")) == 2
        picker = at.selectbox(key="at_query")  # opens on the first output step, after ":"
        assert picker.options[0].startswith("0: <s>")
        assert picker.options[picker.value] == "12: ##:"  # the template's last token
    elif section == "attribution":  # the methods that explain it
        assert at.selectbox(key="atr_method").options == [
            "Raw attention",  # its one attention: a model of one stack has no cross-attention
            "Attention rollout",
            "Norm-based",
            "ALTI+",
            "Value zeroing",
            "Gradient × input",
            "Integrated gradients",
            "Saliency",
            "DeepLIFT",
            "GradientSHAP",
        ]
        assert "Not offered for this model" not in texts(at) and len(at.get("plotly_chart")) >= 2
    elif section == "patch":
        charts = {c.key for c in at.get("plotly_chart")}
        assert charts == {"patch_heads", "patch_stream"} and "the answers you gave" in texts(at)
    elif section == "lens":
        assert "final norm (LlamaRMSNorm) and lm_head" in texts(at)


def test_the_indirect_object_example_fills_the_patching_boxes(lm_dirs):
    from core.attention.patching import INDIRECT_OBJECT

    query = {"model": "checkpoints/gpt2/", "sentence": "the boy is tall .", "section": "patch"}
    at = run_page_script("attention.py", query)
    at.button(key="at_patch_ioi").click().run()
    assert_clean(at)
    assert at.text_area(key="at_prompt").value == INDIRECT_OBJECT["prompt"]
    assert at.text_input(key="at_sentence").value == "John"
    assert at.text_input(key="at_corrupt").value == "Mary"
    assert at.text_input(key="at_patch_answer").value == "Mary"
    assert at.query_params["prompt"] == INDIRECT_OBJECT["prompt"]
    # the tiny tokenizer splits the names into pieces: a real GPT-2 reads each as one token;
    # either way the page shows the patching result or one line of why not
    assert at.get("plotly_chart") or at.error or at.info


@pytest.mark.parametrize("family", ["bloom", "falcon", "phi", "gemma2"])
def test_the_issue_69_families_read_inside_a_head_the_lens_and_attribution(
    studio_dirs, lm_models, family
):
    """Issue 69, item 13: BLOOM (ALiBi), Falcon and Phi (a parallel residual), Gemma 2
    (soft caps, a window every other layer) open in Inside a head, the lens and Attribution;
    what a row refuses is left out of the methods offered, with why."""
    from core.attribution.methods import METHOD_NAMES
    from core.model.architectures import ARCHITECTURES

    shutil.copytree(lm_models[family], studio_dirs["checkpoints"] / family)
    words = {"bloom": "position bias", "gemma2": "50·tanh(", "phi": "RoPE", "falcon": "RoPE"}
    for section in ("inside", "lens", "attribution"):
        query = {"model": f"checkpoints/{family}/", "sentence": "i am cold .", "section": section}
        at = run_page_script("attention.py", query)
        assert_clean(at)
        assert at.get("plotly_chart"), (family, section)
        if section == "inside":
            assert words[family] in texts(at), family
        refuses = ARCHITECTURES[family].refuses  # methods, and sections such as DLA
        refused = {m: why for m, why in refuses.items() if m in METHOD_NAMES}
        if section == "attribution" and refused:
            left_out = [METHOD_NAMES[m] for m in refused]
            assert "Not offered for this model" in texts(at)
            assert all(name in texts(at) for name in left_out), family
            for why in set(refused.values()):  # every reason said, each once
                assert plain(texts(at)).count(plain(why)) == 1, (family, why)
            assert at.selectbox(key="atr_method").value not in refused
