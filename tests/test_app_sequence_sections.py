"""AppTests of what the Attention page offers a model that reads a token sequence (the shipped
induction model): the Show radio offers only the sections its capabilities allow (a link to
another opens the maps and says why in one line), Decoding playback words its forced pass as
one, Over training names the run's probe a sequence, as ``probe_noun`` does, and Remove heads
scores its sequence forced, as ``python -m core.ablate --heads`` prints it."""

from __future__ import annotations

from core.attention.snapshots import probe_noun
from core.model.opened import open_model
from pages.ui.attention.sections import SECTION_KEYS
from tests.helpers import plain
from tests.test_app_sequence_models import (  # noqa: F401 - the module's fixture
    HISTORY,
    SHIPPED,
    attention_page,
    studio_folders,
    texts,
)
from tests.test_sequence_ablation import HEAD, command_lines

MODEL = f"checkpoints/{SHIPPED.name}/"


def test_the_show_radio_offers_only_what_the_model_can_show(studio_folders):  # noqa: F811
    at = attention_page(MODEL, "maps")
    lm = open_model(str(SHIPPED))
    offered = at.radio(key="at_section").options
    assert offered == [at.radio(key="at_section").format_func(k) for k in SECTION_KEYS
                       if lm.supports(k) is None]  # fmt: skip
    for refused in ("Compare", "Attribution", "Alignment", "Patching", "Where tokens live"):
        assert refused not in offered
    assert not at.info, [plain(i.value) for i in at.info]


def test_a_link_to_a_section_it_cannot_show_opens_the_maps_and_says_why(studio_folders):  # noqa: F811
    at = attention_page(MODEL, "patch")
    lm = open_model(str(SHIPPED))
    assert at.radio(key="at_section").value == "maps" and at.get("plotly_chart")
    (note,) = [plain(w.value) for w in at.warning if "section=patch" in w.value]
    assert plain(lm.supports("patch")).rstrip(".") in note
    assert not at.info, [plain(i.value) for i in at.info]


def test_playback_words_the_forced_pass_as_one(studio_folders):  # noqa: F811
    at = attention_page(MODEL, "playback")
    assert "one teacher-forced pass over the given output" in texts(at)
    assert "is given the next token" in texts(at) and "produces" not in texts(at)
    assert at.get("plotly_chart")  # its self-attention, and no empty cross chart beside it
    assert all("Cross attention" not in c.proto.spec for c in at.get("plotly_chart"))
    assert "as it generated this output" not in texts(at)
    assert not [b for b in at.text_input if b.key == "at_ref"]  # nothing decoded freely
    assert "Teacher-forced vs free-running" not in [s.value for s in at.subheader]


def test_over_training_calls_the_probe_a_sequence(studio_folders):  # noqa: F811
    assert probe_noun(HISTORY) == "sequence"
    at = attention_page(MODEL, "training")
    assert "probe sentence" not in texts(at)
    assert "**When heads specialise** (probe sequences)" in [m.value for m in at.markdown]
    (table,) = [d.value for d in at.dataframe if "number" in d.value.columns]
    assert "probe sequences" in table.columns


def test_remove_heads_on_the_induction_model_scores_its_forced_sequence(studio_folders):  # noqa: F811
    at = attention_page(MODEL, "ablation", ablate=HEAD)
    text = texts(at)
    assert "decoded freely" not in text and "log-probability" not in [m.label for m in at.metric]
    assert f"python -m core.ablate --heads {HEAD}` prints the same" in text
    base, cut = command_lines("--heads", HEAD)
    (original, removed) = [m for m in at.metric if m.label == "loss (nats per token)"]
    assert original.value == f"{base['loss']:.3f}" and removed.value == f"{cut['loss']:.3f}"
    assert f"{cut['firsts']} of 16 tokens are the model's first choice" in text
    assert len(at.get("plotly_chart")) >= 3  # the maps with and without the head follow
