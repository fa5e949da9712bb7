"""Without network and without a copy of fra-eng, the Train page says what works instead of
offering a download that fails (a new user offline was told "Download fra-eng now")."""

from __future__ import annotations

import socket

import pytest

from core.corpus import source
from pages.ui.train import form
from tests.helpers import assert_clean, plain, run_app


@pytest.fixture
def no_fra_eng(monkeypatch, tmp_path):
    """No FRA_ENG_ZIP and an empty download cache; the host's answer asked afresh."""
    monkeypatch.delenv(source.FRA_ENG_ENV, raising=False)
    monkeypatch.setenv("ATTENTION_STUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(form, "_REACHABLE", {})


def train_form(monkeypatch, online: bool):
    monkeypatch.setattr(source, "reachable", lambda *a, **k: online)
    at = run_app()
    at.switch_page("pages/train.py")
    at.run()
    assert_clean(at)
    return at


def test_offline_the_form_names_what_works_instead_of_a_download(no_fra_eng, monkeypatch):
    at = train_form(monkeypatch, online=False)
    (warning,) = [plain(w.value) for w in at.warning if "fra-eng" in w.value]
    assert "cannot be reached" in warning and "upload" in warning and "FRA_ENG_ZIP" in warning
    assert "Download fra-eng now" not in [b.label for b in at.button]


def test_online_the_form_offers_the_download(no_fra_eng, monkeypatch):
    at = train_form(monkeypatch, online=True)
    assert "Download fra-eng now" in [b.label for b in at.button]
    assert not [w for w in at.warning if "cannot be reached" in w.value]


def test_a_host_is_reachable_only_where_something_listens():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert source.reachable(f"http://127.0.0.1:{port}/fra-eng.zip", timeout=2)
    assert not source.reachable(f"http://127.0.0.1:{port}/fra-eng.zip", timeout=2)  # closed
    assert not source.reachable("http://no-such-host.invalid/fra-eng.zip", timeout=2)


def test_a_page_s_reason_names_no_flag_and_ends_once(monkeypatch, tmp_path):
    """The Translate page's hint read "… (pass the corpus with --data, …).." to a browser
    user, who has no flag to pass."""
    from core.model.checked_translation import validation_examples

    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path))
    meta = {"data_config": {"source": "gone.tsv", "source_sha1": "0" * 40}}
    examples, reason = validation_examples(meta)
    assert examples == [] and "--data" not in reason and not reason.endswith(".")
    assert "whoever runs the server" in reason
    assert not reason.startswith("The validation sentences")  # the page says "No validation
    # sentences to offer: " before it ("…: The validation sentences cannot be rebuilt: …")


def test_the_trainers_log_line_reads_as_words_not_a_python_dict():
    """The log showed "training on cpu: {'path': …, 'pairs_read': 30, …}"."""
    from core.corpus.splits import summary_words

    summary = {"path": "/srv/data/tiny.tsv", "pairs_read": 30, "skipped_lines": 0}
    summary |= {"too_long": 0, "train": 28, "val": 1, "test": 1, "src_vocab": 49, "tgt_vocab": 56}
    assert summary_words(summary) == (
        "tiny.tsv: 30 pairs read (0 skipped lines, 0 too long); 28 train, 1 validation, "
        "1 test; vocabularies 49 English, 56 French"
    )
    assert "{" not in summary_words({"path": "x.tsv"})  # a missing number is a "?"


@pytest.mark.parametrize(
    "section, what, controls",
    [
        (
            "project",
            "The tokens cannot be placed for this model here",
            ["Side", "Layer", "Method", "Dimensions", "Colour by", "Sentences"],
        ),
        (
            "attribution",
            "Faithfulness cannot be measured for this model here",
            ["Validation sentences", "Include integrated gradients and GradientSHAP"],
        ),
        (
            "ablation",
            "Head importance cannot be computed for this model here",
            ["Validation sentences", "Compute head importance"],
        ),
    ],
)
def test_a_section_without_the_corpus_says_so_calmly_before_its_controls(
    no_fra_eng, shipped_model_dirs, monkeypatch, tmp_path, section, what, controls
):
    """ "Where tokens live" showed the command line's remedy ("pass the corpus with --data")
    to a browser user; then, offline or on a fresh install, it and Faithfulness showed a red
    error under menus that could not work, and Remove heads offered "Compute head
    importance", erring only once clicked. Each section needing the corpus now says calmly,
    before any of its controls, what it cannot do and how the corpus is had; the library's
    words sit under "Details" for whoever runs the server."""
    from tests.helpers import run_page_script

    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path / "data"))
    at = run_page_script("attention.py", {"section": section, "attr_mode": "faithfulness"})
    assert_clean(at)
    infos = [plain(i.value) for i in at.info]
    assert any(i.startswith(what) and "not on this server" in i for i in infos), infos
    assert any("FRA_ENG_ZIP" in i and "data folder" in i for i in infos), infos
    assert not [e for e in at.error if "corpus" in e.value or "validation" in e.value]
    assert not any("--data" in i for i in infos)
    assert any("Details" in x.label for x in at.expander)
    labels = [w.label for w in (*at.selectbox, *at.number_input, *at.toggle, *at.button)]
    labels += [w.label for w in at.get("segmented_control")]
    assert not [c for c in controls if c in labels], labels
