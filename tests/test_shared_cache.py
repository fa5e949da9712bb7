"""The server's results shared by every session, bounded in bytes (issue 31, item 2), and a
translation's maps held to their budget before they are made."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from core.corpus.vocab import SPECIALS, Vocab
from core.model.config import ModelConfig
from core.model.parts import GREEDY, DecodeSettings, TranslationError
from core.model.studio_model import StudioModel
from core.model.transformer import Transformer
from core.runs import budget
from pages.ui import cached
from pages.ui.shared_cache import SharedCache, shared


def test_the_cache_holds_no_more_bytes_than_its_limit():
    pool = SharedCache(limit=10_000, item_limit=4_000)
    for i in range(50):
        assert pool.put(("f", i), i, 1_500)
        assert pool.total <= 10_000
    assert not pool.put(("f", "big"), "x", 5_000)  # past the item limit: returned, not kept
    assert pool.get(("f", 49)) == (True, 49) and pool.get(("f", 0)) == (False, None)
    pool.clear("f")
    assert pool.total == 0 and not pool.entries


def test_sessions_asking_the_same_question_share_one_computation():
    pool, calls = SharedCache(limit=10**6), []

    @shared(pool=pool)
    def slow(x: int, _ignored: object = None) -> int:
        calls.append(x)
        time.sleep(0.3)
        return x * 2

    results = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(slow(7, _ignored=i))) for i in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [14] * 5 and calls == [7]  # ``_ignored`` is not part of the key
    assert slow.peek(7) == (True, 14) and slow.peek(8) == (False, None)


def fake_model(heads: int, layers: int, positions: int = 512) -> StudioModel:
    """A word-level studio model of these sizes, its weights on the meta device (never
    allocated): cached.fitted reads only its sizes and how it counts a sentence's tokens."""
    cfg = ModelConfig(
        src_vocab_size=len(SPECIALS) + 1,
        tgt_vocab_size=len(SPECIALS) + 1,
        d_model=64,
        num_heads=heads,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        max_positions=positions,
    )
    with torch.device("meta"):
        model = Transformer(cfg)
    vocab = Vocab([*SPECIALS, "go"])
    return StudioModel(model, vocab, vocab)


def test_a_small_models_translation_is_left_as_asked():
    settings = DecodeSettings(max_len=200)
    assert cached.fitted(fake_model(4, 2), "i am cold .", settings) == (settings, "")


def test_the_longest_output_is_cut_to_what_the_budget_holds():
    lm = fake_model(16, 12)
    settings, note = cached.fitted(lm, "i am cold .", DecodeSettings(max_len=200))
    assert 1 <= settings.max_len < 200 and "was cut from 200 to" in note
    cfg = vars(lm.cfg)
    assert budget.translation_bytes(cfg, 5, settings.max_len) <= budget.TRANSLATION_BYTES
    assert budget.translation_bytes(cfg, 5, settings.max_len + 1) > budget.TRANSLATION_BYTES


def test_a_sentence_whose_maps_cannot_fit_is_refused_before_decoding():
    """The audit's model (64 heads, 24 + 24 layers) on a 60-word sentence: the encoder's maps
    alone pass the budget."""
    with pytest.raises(TranslationError, match="the server holds at most 16.0 MB"):
        cached.fitted(fake_model(64, 24), " ".join(["go"] * 60), GREEDY)


def test_never_ending_translations_stay_within_the_servers_bytes(wide_checkpoint, monkeypatch):
    """A model that never emits <eos>, asked for 200 tokens on many distinct links: the kept
    translations never pass the pool's bytes (before: 256 entries whatever their size)."""
    from pages.ui import shared_cache

    pool = SharedCache(limit=3 * 2**20)
    monkeypatch.setattr(shared_cache, "RESULTS", pool)

    @shared(pool=pool)
    def translate(_lm, path, sentence, settings):
        return cached.translation.translate_sentence(_lm, sentence, settings)

    lm = StudioModel.load(wide_checkpoint)
    settings = DecodeSettings(max_len=200)
    for i, sentence in enumerate(["go .", "i lost .", "he's calm .", "i'm home .", "go go ."]):
        t = translate(lm, str(wide_checkpoint), sentence, settings)
        assert len(t.output_tokens) >= 1
        assert budget.sizeof(t) <= budget.translation_bytes(vars(lm.model.cfg), 10, 200)
        assert pool.total <= 3 * 2**20, i


def test_every_model_the_picker_offers_stays_open_once_loaded():
    """Issue 49, item 3: a 256-640 MB Hugging Face model (opus-mt's 300 MB) is kept in the
    models' pool, not loaded again at every rerun."""
    from core.runs import budget
    from pages.ui.shared_cache import MODELS, SharedCache

    assert MODELS.item_limit >= max(budget.OPEN_BYTES.values()) == budget.HF_MODEL_BYTES
    pool = SharedCache(MODELS.limit, MODELS.item_limit)
    assert pool.put("opus-mt", object(), 300 * budget.MB)
    assert pool.get("opus-mt")[0]
    assert not pool.put("too big", object(), budget.HF_MODEL_BYTES + 1)


def test_a_forced_reference_is_budgeted_before_its_pass(monkeypatch):
    """Issue 49, item 2: decoding playback's reference comes from the URL; an over-long one,
    or one whose maps would not fit, is refused before any pass, and nothing is kept."""
    from core.attention import maps

    monkeypatch.setattr(maps, "translate_sentence", lambda *a: pytest.fail("forced"))
    big = fake_model(64, 24)  # the audit's model: 60 words' maps pass the budget
    with pytest.raises(TranslationError, match="the server holds at most 16.0 MB"):
        cached.teacher_forced(big, ("big", 0), "go .", " ".join(["go"] * 60))
    monkeypatch.undo()
    small = fake_model(1, 1)
    with pytest.raises(TranslationError, match="at most 60 tokens"):
        cached.teacher_forced(small, ("small", 0), "go .", "go " * 700)  # 4,000 characters
