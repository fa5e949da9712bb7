"""A run's start-up and its end, as a new user met them (issue 68, items 3 and 9; issue 69,
items 4 and 5): the corpus prepared once per content and settings, what the start-up is
doing, the ETA of a time budget and of a resumed run, a run too short to learn, "Train
longer", and uploads that keep their name and say what is wrong with them."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from core.corpus import splits as corpus_splits
from core.corpus import user_files
from core.corpus.batches import encode_pairs
from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.places import runs_root
from core.runs import corpus_cache, jobs
from core.runs import status as run_status
from core.runs.corpus_cache import CACHED, READING, prepared_corpus
from core.runs.owners import User
from core.runs.recorder import RunEta, budget_eta
from core.runs.run_dir import RunDir, RunError
from core.training.config import longer_limits
from tests.helpers import TINY, make_run

BPE = {"source": str(TINY), "split": "head", "num_train": 24, "num_val": 6, "min_freq": 1}


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """The runs folder (and so the corpus cache, .corpora) in a temporary directory."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def told(calls: list):
    """A phase callback that keeps the words it hears."""
    return calls.append


# ----------------------------------------------------------------------------- corpus cache


def test_a_second_run_of_the_same_corpus_and_settings_reads_it_prepared(runs, monkeypatch):
    """Issue 68, item 3: reading the corpus and learning BPE took ~11 minutes before step 1,
    on every run. The second preparation reads nothing and learns nothing."""
    cfg = DataConfig(**BPE, tokenizer="bpe", bpe_vocab=120)
    first_words: list[str] = []
    first = prepared_corpus(cfg, phase=told(first_words))
    assert first_words == [READING, "learning BPE (cached next time)", corpus_cache.ENCODING]
    assert len(list((runs / ".corpora").glob("*.npz"))) == 1

    def refused(*_, **__):
        raise AssertionError("the corpus was read again")

    monkeypatch.setattr(corpus_cache, "load_splits", refused)
    monkeypatch.setattr(corpus_cache, "vocabularies", refused)
    words: list[str] = []
    again = prepared_corpus(cfg, phase=told(words))
    assert words == [CACHED]
    assert again.src_vocab.tokenizer_json == first.src_vocab.tokenizer_json
    assert again.tgt_vocab.itos == first.tgt_vocab.itos
    assert [again.train.pairs, again.val.pairs, again.test.pairs] == [
        first.train.pairs,
        first.val.pairs,
        first.test.pairs,
    ]
    assert again.summary == first.summary
    for name, split in (("train", again.train), ("val", again.val)):  # the trainer's ids
        fresh = encode_pairs(split, again.src_vocab, again.tgt_vocab)
        assert len(again.ids[name]) == len(fresh) == len(split.pairs)
        for (s, t), (s2, t2) in zip(again.ids[name], fresh):
            assert s.dtype == np.int64 and s.tolist() == s2.tolist() and t.tolist() == t2.tolist()


@pytest.mark.parametrize(
    "change",
    [{"max_len": 5}, {"bpe_vocab": 100}, {"direction": "fr-en"}, {"split_seed": 1}, "content"],
)
def test_another_corpus_or_setting_is_prepared_anew(runs, tmp_path, change):
    source = tmp_path / "pairs.tsv"
    source.write_bytes(TINY.read_bytes())
    cfg = DataConfig(**{**BPE, "source": str(source)}, tokenizer="bpe", bpe_vocab=120)
    prepared_corpus(cfg)
    if change == "content":
        source.write_bytes(TINY.read_bytes() + b"One more.\tUne de plus.\n")
    else:
        cfg = DataConfig(
            **{**BPE, "source": str(source), "tokenizer": "bpe", "bpe_vocab": 120, **change}
        )
    words: list[str] = []
    prepared_corpus(cfg, phase=told(words))
    assert words[0] == READING
    copy = tmp_path / "same.tsv"  # the same content elsewhere: the same entry
    copy.write_bytes(source.read_bytes())
    words = []
    prepared_corpus(DataConfig(**{**cfg.__dict__, "source": str(copy)}), phase=told(words))
    assert words == [CACHED]


def test_a_damaged_entry_is_prepared_again(runs):
    cfg = DataConfig(**BPE)
    prepared_corpus(cfg)
    (entry,) = (runs / ".corpora").glob("*.npz")
    entry.write_bytes(b"not a zip")
    words: list[str] = []
    corpus = prepared_corpus(cfg, phase=told(words))
    assert words[:2] == [CACHED, READING] and len(corpus.train.pairs) == 24


def test_two_trainers_writing_one_entry_leave_a_whole_one(runs, tmp_path):
    cfg = DataConfig(**BPE)
    corpus = prepared_corpus(cfg, folder=tmp_path / "first")
    entry = tmp_path / "shared" / "key.npz"
    writers = [
        threading.Thread(target=corpus_cache.write_entry, args=(entry, corpus)) for _ in range(4)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert [p.name for p in entry.parent.iterdir()] == ["key.npz"]  # no temporary file left
    read = corpus_cache.read_entry(entry, TINY)
    assert read is not None and read.train.pairs == corpus.train.pairs


def test_the_cache_stays_within_its_bound(runs, tmp_path):
    corpus = prepared_corpus(DataConfig(**BPE), folder=tmp_path / "x")
    folder = tmp_path / "bounded"
    corpus_cache.write_entry(folder / "a.npz", corpus)
    one = (folder / "a.npz").stat().st_size
    corpus_cache.write_entry(folder / "b.npz", corpus, limit=one + one // 2)
    assert [p.name for p in folder.glob("*.npz")] == ["b.npz"]  # the older went
    corpus_cache.write_entry(folder / "c.npz", corpus, limit=one // 2)  # larger than it all
    assert not (folder / "c.npz").exists()


def test_unknown_words_are_counted_from_the_encoded_pairs_as_before(runs):
    cfg = DataConfig(**{**BPE, "min_freq": 3})
    corpus = prepared_corpus(cfg)
    plain = corpus_splits.load_corpus(cfg)
    assert corpus.ids and not plain.ids
    for side, vocab, column in (("src", corpus.src_vocab, 0), ("tgt", corpus.tgt_vocab, 1)):
        counted = corpus_splits.unk_share(corpus, vocab, column)
        assert counted == pytest.approx(corpus_splits.unk_share(plain, vocab, column)), side
        assert counted > 0  # min_freq 3 on 24 pairs: many <unk>
    assert corpus_splits.unk_warnings(corpus, cfg) == corpus_splits.unk_warnings(plain, cfg)


def test_other_vocabularies_drop_the_encoded_pairs(runs):
    corpus = prepared_corpus(DataConfig(**BPE))
    corpus.use_vocabs(corpus.src_vocab, corpus.tgt_vocab)
    assert corpus.ids
    other = corpus_splits.load_corpus(DataConfig(**{**BPE, "min_freq": 2}))
    corpus.use_vocabs(other.src_vocab, other.tgt_vocab)
    assert corpus.ids == {}


# ----------------------------------------------------------------------------- start-up words


def info_of(**fields) -> run_status.RunInfo:
    """A RunInfo written by hand."""
    return run_status.RunInfo(run_id="r", path=TINY.parent, alive=True, resumable=False, **fields)


def test_the_start_up_says_what_it_does_and_for_how_long():
    info = info_of(
        state="starting",
        launched_at=1000.0,
        status={"message": "learning BPE (cached next time)", "phase_started_at": 1100.0},
    )
    assert run_status.startup_words(info, now=1165.0) == (
        "learning BPE (cached next time) for 1 min 05 s · 2 min 45 s since launch"
    )
    earlier = info_of(  # a phase of the launch before: no duration of this one
        state="starting",
        launched_at=1000.0,
        status={"message": "building the model", "phase_started_at": 10.0},
    )
    assert run_status.startup_words(earlier, now=1030.0) == "building the model · 30 s since launch"


# ----------------------------------------------------------------------------- ETA


def trainer_of(budget: float, elapsed: float, step: int = 50, total: int | None = None):
    """What budget_eta reads of a trainer."""
    return SimpleNamespace(
        cfg=SimpleNamespace(time_budget=budget),
        state=SimpleNamespace(elapsed=elapsed, step=step),
        total_steps=total,
    )


def test_a_time_budget_gives_the_eta_before_the_pace_does():
    """Issue 68, item 3: at 38 % of a ten-minute budget the page said "ETA —"."""
    assert budget_eta(trainer_of(600.0, 228.0)) == pytest.approx(372.0)
    assert budget_eta(trainer_of(600.0, 700.0)) == 0.0
    assert budget_eta(trainer_of(0.0, 228.0)) is None  # no budget: only a pace tells
    assert budget_eta(trainer_of(600.0, 60.0, step=90, total=100)) is None  # steps end first
    clock = SimpleNamespace(now=0.0)
    eta = RunEta(lambda: clock.now)
    assert eta(0.38, fallback=372.0) == 372.0  # the first record: no pace yet
    clock.now = 10.0
    assert eta(0.40, fallback=360.0) == pytest.approx(0.6 * 10 / 0.02)  # then the pace


@pytest.mark.slow  # a process stands in for the trainer
def test_a_resumed_run_has_no_eta_until_it_has_its_own_pace(runs):
    """Issue 69, item 5: right after Resume the page said "step 139 of 1,200 · ETA 0 s", the
    ETA the run's last launch wrote at its end."""
    import time

    from tests.helpers import fake_trainer

    rd = make_run(runs, "resumed", {"state": "finished", "step": 139, "eta_s": 0.0})
    rd.write_status(total_steps=1200, progress=0.1)
    time.sleep(0.05)
    job = json.loads(rd.job.read_text())
    rd.job.write_text(json.dumps({**job, "launched_at": time.time()}))  # resumed after its end
    time.sleep(0.05)
    sleeper = fake_trainer(rd.path)
    try:
        rd.job.write_text(json.dumps({**json.loads(rd.job.read_text()), "pid": sleeper.pid}))
        info = run_status.run_info("resumed")
        assert info.alive and info.eta_s is None
        rd.write_status(state="running", eta_s=420.0)  # this launch's own
        assert run_status.run_info("resumed").eta_s == 420.0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_trainer_starting_again_forgets_its_last_launchs_eta(runs):
    """Issue 69, item 5: the ETA of 0 s a run wrote at its end stayed through its resume."""
    from core.runs.training_run import start_status

    rd = make_run(runs, "resumed", {"state": "finished", "step": 139, "eta_s": 0.0})
    state = SimpleNamespace(step=139, elapsed=80.0, best_bleu=3.0)
    trainer = SimpleNamespace(
        cfg=SimpleNamespace(time_budget=0.0, log_every=20),
        state=state,
        total_steps=1200,
        progress=lambda: 139 / 1200,
    )
    start_status(rd, trainer, [], {})
    assert rd.read_status()["eta_s"] is None  # unknown until this launch has a pace
    trainer.cfg.time_budget, trainer.total_steps = 600.0, None
    start_status(rd, trainer, [], {})
    assert rd.read_status()["eta_s"] == pytest.approx(520.0)  # what its budget leaves


# ----------------------------------------------------------------------------- short runs


def test_a_budget_that_bought_too_few_steps_says_so():
    """Issue 68, item 3: the ten-minute budget ended at step 71 with BLEU 0, without a word."""
    short = info_of(state="finished", step=71, best_bleu=0.0, val_pairs=3153, time_budget=600.0)
    note = run_status.short_run_note(short)
    assert "time budget of 10 min 00 s bought 71 training steps" in note
    assert "validation BLEU 0.0" in note and "**Train longer**" in note
    theirs = run_status.short_run_note(short, yours=False)  # no button shows: who can
    assert "below" not in theirs and "Its owner or a teacher can give it more" in theirs
    zero = info_of(state="finished", step=4000, best_bleu=0.4, val_pairs=10)
    assert "4,000 training steps (validation BLEU 0.4)" in run_status.short_run_note(zero)
    for fine in (
        info_of(state="finished", step=4000, best_bleu=30.0, val_pairs=3153, time_budget=600.0),
        info_of(state="running", step=71, best_bleu=0.0, val_pairs=3153, time_budget=600.0),
        info_of(state="finished", step=120, best_bleu=5.0, val_pairs=128, preset="d2l"),
    ):
        assert run_status.short_run_note(fine) == ""


def test_a_run_without_validation_pairs_is_not_told_to_expect_a_low_bleu():
    """Issue 68, item 9: "Expect a low validation BLEU" on a run with no validation pairs."""
    none = run_status.few_pairs_note(info_of(state="finished", preset="d2l", val_pairs=0))
    assert "no validation pairs" in none and "Expect a low validation BLEU" not in none
    some = run_status.few_pairs_note(info_of(state="finished", preset="d2l", val_pairs=128))
    assert "Expect a low validation BLEU" in some


@pytest.mark.parametrize(
    "model, data",
    [
        ({"arch": "encoder"}, {}),
        ({}, {"task": "induction"}),
        ({"arch": "decoder-only"}, {"task": "lm"}),
    ],
)
def test_a_run_that_does_not_translate_is_told_nothing_of_bleu(jobs_env, model, data):
    """Audit: a masked-LM run on the d2l preset's 512 pairs was told to "expect a low
    validation BLEU ... and examples full of <unk>": it has neither."""
    rd = make_run(runs_root(), "r", {"state": "finished", "step": 120}, {"preset": "d2l"})
    rd.write_config({"data": {"split": "head", "num_train": 512, **data}, "model": model})
    info = run_status.run_info("r")
    assert not info.translates and info.train_pairs == 512
    assert run_status.few_pairs_note(info) == "" and run_status.short_run_note(info) == ""
    rd.write_config({"data": {"split": "head", "num_train": 512}, "model": {}})
    assert "Expect a low validation BLEU" in run_status.few_pairs_note(run_status.run_info("r"))


def test_an_empty_model_output_reads_empty():
    """Issue 68, item 3: the examples' model output was blank."""
    examples = [
        {"src": "go .", "out": "", "ref": "va !"},
        {"src": "hi .", "out": "salut .", "ref": "salut ."},
    ]
    frame = run_status.latest_examples([{"record": "eval", "examples": examples}])
    assert frame["model output"].tolist() == ["(empty)", "salut ."]


# ----------------------------------------------------------------------------- train longer


def test_longer_limits_replace_every_limit_by_one():
    assert longer_limits(71, 600.0, minutes=10) == {
        "epochs": 0,
        "max_steps": 0,
        "time_budget": 1200.0,
    }
    assert longer_limits(71, 600.0, steps=500) == {
        "epochs": 0,
        "max_steps": 571,
        "time_budget": 0.0,
    }
    for bad in (
        {},
        {"steps": 5, "minutes": 1},
        {"steps": -5},
        {"minutes": float("inf")},
        {"steps": 2.5},
    ):
        with pytest.raises(ValueError):
            longer_limits(71, 600.0, **bad)


def finished_run(runs, owner: str | None = None) -> RunDir:
    """A finished run with a last checkpoint at step 7 (tests.helpers.make_run)."""
    rd = make_run(runs, "done", {"state": "finished"}, job={"owner": owner}, checkpoint=True)
    rd.write_config({"data": {}, "model": {}, "train": {"epochs": 30, "time_budget": 0.0}})
    return rd


def test_train_longer_resumes_a_finished_run_with_its_new_limit(runs, monkeypatch):
    """Issue 69, item 4: a finished run could go on only from the command line."""
    finished_run(runs)
    asked = []
    monkeypatch.setattr(jobs, "resume_run", lambda *a, **k: asked.append((a, k)))
    assert jobs.train_longer("done", steps=500) == {
        "epochs": 0,
        "max_steps": 507,
        "time_budget": 0.0,
    }
    ((args, kwargs),) = asked
    assert args[:2] == ("done", {"epochs": 0, "max_steps": 507, "time_budget": 0.0})
    with pytest.raises(RunError, match="more steps must be a positive number"):
        jobs.train_longer("done", steps=-3)
    with pytest.raises(RunError, match="max_steps must be at most"):
        jobs.train_longer("done", steps=10**10)


def test_train_longer_is_for_the_owner_and_within_the_quota(runs, monkeypatch):
    from core.runs import owners, quota

    finished_run(runs, owner="alice")
    monkeypatch.setenv(owners.IDENTITY_ENV, "header:X-Forwarded-User")
    with pytest.raises(RunError, match="belongs to alice"):
        jobs.train_longer("done", minutes=5, user=User("bob"))
    monkeypatch.setenv(quota.QUOTA_ENV, str(1e-6))  # a kilobyte
    with pytest.raises(RunError, match="Not enough room"):
        jobs.train_longer("done", minutes=5, user=User("alice"))


def test_a_longer_run_is_budgeted_for_its_new_limit(runs):
    rd = finished_run(runs)
    rd.write_config(
        {"data": {}, "model": {}, "train": {"max_steps": 100, "log_every": 1, "eval_every": 1}}
    )
    before = jobs._run_budget(rd, {})
    assert jobs._run_budget(rd, {}, {"max_steps": 10_000}) > before  # more records to log


# ----------------------------------------------------------------------------- uploads


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("pairs.csv", b"english,french\nGo.,Va !\n", "looks like comma-separated values"),
        ("model.bin", b"\x00\x01\x02binary", "is a binary file, not text"),
        ("excel.txt", "Go.\tVa !\n".encode("utf-16"), "is UTF-16 text: save it as UTF-8"),
        ("empty.tsv", b"  \n", "is empty"),
    ],
)
def test_an_upload_says_in_one_line_what_is_wrong_with_it(runs, name, data, words):
    """Issue 68, item 9: a CSV got Streamlit's "text/csv files are not allowed"."""
    with pytest.raises(DataError, match=words) as caught:
        user_files.stage_upload(name, data)
    assert name in str(caught.value) and "\n" not in str(caught.value)
    assert user_files.upload_problem("pairs.tsv", b"Go.\tVa !\n") is None
    assert user_files.upload_problem("pairs.txt", b"Hi, you. ||| Salut, toi.\n") is None
    assert user_files.upload_problem("corpus.zip", b"PK\x03\x04\x00rest") is None  # read as zip


def test_a_run_keeps_its_corpus_under_the_users_file_name(runs):
    """Issue 68, item 9: an uploaded run's data was called "data.txt"."""
    staged = user_files.stage_upload("mes paires (v2).tsv", TINY.read_bytes())
    assert staged.name == "mes-paires-v2.tsv"
    rd = RunDir(runs / "r")
    rd.create()
    source = jobs._stage_source(rd, str(staged))
    assert source == str(rd.path / "corpus" / "mes-paires-v2.tsv")
    assert user_files.describe_data({"source": source}) == "mes-paires-v2.tsv"
    from core.places import run_corpus_files

    assert run_corpus_files(rd.path) == [rd.path / "corpus" / "mes-paires-v2.tsv"]


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("mes paires.txt", "mes-paires.txt"),
        ("C:\\Users\\me\\pairs.tsv", "pairs.tsv"),
        ("../../etc/passwd", "passwd"),
        (".hidden.tsv", "hidden.tsv"),
        ("***", "corpus.txt"),
        ("é" * 300 + ".tsv", "é" * 76 + ".tsv"),  # 80 characters at most
        ("語" * 300 + ".tsv", "語" * 65 + ".tsv"),  # and 200 bytes
    ],
)
def test_a_users_file_name_is_made_safe(name, kept):
    assert user_files.safe_file_name(name) == kept
