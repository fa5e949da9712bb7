"""A saved model carries its validation pairs (new user, round three, item 1): a run trained on
an uploaded corpus, saved as a model and copied where the corpus is not, keeps head
importance, the faithfulness table and the Translate page's validation sentences."""

from __future__ import annotations

import shutil

from core.attention.importance import importance_for
from core.attribution.faithfulness import faithfulness_for
from core.model.checked_translation import validation_examples
from core.model.checkpoints import (
    CARRIED_PAIRS,
    carried_validation,
    read_checkpoint,
    validation_source,
)
from core.model.studio_model import StudioModel
from core.places import runs_root
from core.runs.promotion import promote
from tests.helpers import TINY


def test_a_saved_model_keeps_its_validation_sentences_without_its_corpus(
    jobs_env, make_run, val_checkpoint, tmp_path, monkeypatch
):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TINY, data / "tiny.tsv")  # the corpus, where the app looks for it by name
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(data))
    rd = make_run(runs_root(), "r1", {"state": "finished"})
    for path in (rd.best, rd.last):
        shutil.copy(val_checkpoint, path)
    saved = promote("r1", "best", "carried")
    ckpt = read_checkpoint(saved)
    assert len(ckpt["validation_pairs"]) == 6 <= CARRIED_PAIRS  # tiny.tsv's 6 held-out pairs
    lm = StudioModel.load(saved)
    with_corpus = importance_for(lm, saved, 6)
    examples, _ = validation_examples(ckpt)

    (data / "tiny.tsv").unlink()  # the model copied to a machine without the corpus
    shutil.rmtree(runs_root() / "r1")
    cfg, carried = validation_source(ckpt)
    assert carried is not None and len(carried.pairs) == 6
    again = importance_for(lm, saved, 6, refresh=True)  # measured again, from the pairs
    assert (again.bleu, again.loss, again.heads) == (with_corpus.bleu, with_corpus.loss,
                                                     with_corpus.heads)  # fmt: skip
    assert validation_examples(ckpt) == (examples, "")
    table = faithfulness_for(lm, saved, 6, ("attention",))
    assert table.sentences == 6


def test_malformed_carried_pairs_are_not_used():
    assert carried_validation({"validation_pairs": [["go .", 3]]}) is None
    assert carried_validation({"validation_pairs": "go .\tva !"}) is None
    assert carried_validation({}) is None


def test_a_fra_eng_model_carries_nothing_any_machine_can_download():
    from core.corpus.source import FRA_ENG_SHA1
    from core.model.checkpoints import validation_pairs_of

    assert validation_pairs_of({"data_config": {"source": "fra-eng"}}) is None
    assert (
        validation_pairs_of({"data_config": {"source": "x.zip", "source_sha1": FRA_ENG_SHA1}})
        is None
    )
