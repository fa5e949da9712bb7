"""AppTest of the Train page's "Architecture" choice of an encoder (issue 66): a BERT-style
masked language model on the translation pairs, the fields shown those it reads."""

from __future__ import annotations

import json

from tests.helpers import assert_clean, plain
from tests.test_app_train import button, train_page
from tests.test_app_train_induction import keys_of, launched  # noqa: F401 - the fixture


def test_an_encoder_is_offered_and_shows_the_fields_it_reads(launched):  # noqa: F811
    at = train_page()
    at.radio(key="preset").set_value("small").run()
    at.selectbox(key="small.model.arch").set_value("encoder").run()
    assert_clean(at)
    numbers = keys_of(at, "number_input")
    assert {"small.model.num_encoder_layers", "small.data.max_len"} <= numbers
    assert "small.model.num_decoder_layers" not in numbers  # one stack: the encoder's
    assert "small.model.num_kv_heads" not in numbers
    assert "small.train.eval_sentences" not in numbers  # it writes no French: no BLEU
    at.number_input(key="small.model.num_encoder_layers").set_value(3)
    at.number_input(key="small.train.time_budget").set_value(60.0)
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    ((preset, chosen),) = launched
    assert preset == "small" and chosen["data"]["task"] == "translation"
    assert chosen["model"]["arch"] == "encoder" and chosen["model"]["num_encoder_layers"] == 3


def test_an_encoder_on_the_induction_task_is_refused_in_one_line(launched):  # noqa: F811
    at = train_page()
    at.radio(key="preset").set_value("induction").run()
    at.selectbox(key="induction.model.arch").set_value("encoder").run()
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert not launched
    shown = " ".join(plain(e.value) for e in at.error)
    assert "the induction task trains a decoder-only model (arch)" in shown


def test_an_encoder_runs_page_shows_its_curves_without_bleu(jobs_env):
    """A finished encoder run (val_loss and val_fill_accuracy, no BLEU), its heads scored at
    each evaluation: the page draws them under "Circuits forming" as for an induction run."""
    from core.places import runs_root
    from core.train import main
    from core.training.settings import to_flags
    from tests.helpers import TINY_PRESET, tiny_config

    run = tiny_config(
        data={"num_train": 20, "num_val": 10},
        model={"arch": "encoder"},
        train={"epochs": 0, "max_steps": 10, "eval_every": 5, "log_every": 5},
    )
    out = runs_root() / "bert"
    assert main(["--preset", TINY_PRESET, *to_flags(run), "--no-progress", "--out", str(out)]) == 0
    at = train_page("bert")
    assert not at.error, [plain(e.value) for e in at.error]
    assert not at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    by_title = {s["layout"]["title"]["text"]: s for s in specs}
    assert "validation loss (cross-entropy)" in by_title and "validation BLEU" not in by_title
    assert any("Circuits forming" in m.value for m in at.markdown)
    heads = by_title["induction score per head"]["data"]
    assert len(heads) == 2 * 4  # every head of the tiny encoder's two layers
    assert all(len(line["x"]) == 2 for line in heads)  # scored at steps 5 and 10
