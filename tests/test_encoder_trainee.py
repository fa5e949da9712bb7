"""The encoder-only model the studio trains (``core.model.encoder_trainee``): BERT's masking of
a pair read as ``[CLS] english [SEP] french [SEP]``, its loss as ``BertForMaskedLM``'s own,
and its ``save_pretrained`` folder read by transformers and by the studio's door."""

from __future__ import annotations

import json

import pytest
import torch

from core.corpus.bpe import BPEVocab
from core.corpus.text import tokenize
from core.corpus.vocab import SPECIALS, Vocab
from core.model.config import ModelConfig
from core.model.encoder_trainee import EVAL_MASK_SEED, MASK, EncoderTrainee
from core.model.trainee import build_model, export_folder

V = 60  # the studio's vocabulary; the model's is V + 1 (the mask)
WORDS = tokenize("i am you are he is cold warm happy tired . je suis tu es il est froid heureux")


def tiny_encoder(vocab_size: int = V, dropout: float = 0.0) -> EncoderTrainee:
    """A two-layer encoder over ``vocab_size`` ids (seeded)."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size, vocab_size, d_model=32, num_heads=4, num_encoder_layers=2, d_ff=64,
        max_positions=128, dropout=dropout, arch="encoder",
    )  # fmt: skip
    return build_model(cfg)


def pair_batch(rows: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(src (B, S) words + <eos>, tgt (B, T + 1) <bos> + words + <eos>), right-padded at
    random lengths."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(rows, length + 1, dtype=torch.long)
    tgt = torch.zeros(rows, length + 2, dtype=torch.long)
    for b in range(rows):
        n, m = (int(torch.randint(1, length + 1, (1,), generator=g)) for _ in range(2))
        src[b, :n] = torch.randint(len(SPECIALS), V, (n,), generator=g)
        src[b, n] = Vocab.eos_id
        tgt[b, 0], tgt[b, m + 1] = Vocab.bos_id, Vocab.eos_id
        tgt[b, 1 : m + 1] = torch.randint(len(SPECIALS), V, (m,), generator=g)
    return src, tgt


def test_an_encoder_is_built_from_its_config_with_a_mask_past_the_vocabulary():
    model = tiny_encoder()
    assert isinstance(model, EncoderTrainee) and not model.decodes
    assert model.lm.config.vocab_size == V + 1 and model.mask_id == V
    assert model.lm.config.type_vocab_size == 2
    assert list(model.parameter_groups()) == ["embedding", "encoder 0", "encoder 1", "output layer"]
    grouped = sum(p.numel() for ps in model.parameter_groups().values() for p in ps)
    assert grouped == model.num_parameters()  # every parameter once (the tied one too)
    with pytest.raises(ValueError, match="one vocabulary"):
        ModelConfig(V, V + 1, arch="encoder").validate()


def test_a_pair_is_read_as_cls_english_sep_french_sep():
    src = torch.tensor([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]])  # source + <eos>, right-padded
    tgt_out = torch.tensor([[10, 11, 2, 0], [12, 13, 14, 2]])  # target + <eos>
    ids, types = tiny_encoder().joined(src, tgt_out)
    assert ids.tolist() == [[1, 5, 6, 7, 2, 10, 11, 2], [1, 8, 9, 2, 12, 13, 14, 2]]
    assert types.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]]
    ids, _ = tiny_encoder().joined(src[1:], tgt_out[:1])  # the padding after the longest: cut
    assert ids.tolist() == [[1, 8, 9, 2, 10, 11, 2]]


def test_bert_masking_chooses_15_percent_of_the_words_80_10_10_never_a_special():
    model = tiny_encoder()
    src, tgt = pair_batch(2000, 60)  # about 18,000 chosen words
    ids, _ = model.joined(src, tgt[:, 1:])  # (B, N)
    torch.manual_seed(1)
    inputs, labels = model.masked(ids)
    words = ids >= len(SPECIALS)
    chosen = labels != -100
    assert not (chosen & ~words).any()  # never <pad>, <bos>, <eos> or <unk>
    assert (inputs[~words] == ids[~words]).all()  # the specials are read as they are
    assert (labels[chosen] == ids[chosen]).all()
    assert float(chosen.sum() / words.sum()) == pytest.approx(0.15, abs=0.005)
    n = int(chosen.sum())
    masked = int((inputs[chosen] == model.mask_id).sum())
    kept = int((inputs[chosen] == ids[chosen]).sum())
    swapped = n - masked - kept
    assert masked / n == pytest.approx(0.8, abs=0.01)
    assert swapped / n == pytest.approx(0.1, abs=0.01)  # (a draw of the word itself: kept)
    assert kept / n == pytest.approx(0.1, abs=0.01)
    assert (inputs[~chosen] == ids[~chosen]).all()
    assert (inputs < model.mask_id + 1).all() and (inputs[chosen & (inputs != model.mask_id)]
                                                   >= len(SPECIALS)).all()  # fmt: skip


def test_every_pair_with_a_word_has_one_masked():
    model = tiny_encoder()
    src = torch.tensor([[5, 2], [2, 0]])  # one word; none
    tgt_out = torch.tensor([[2], [2]])
    ids, _ = model.joined(src, tgt_out)
    for seed in range(20):
        torch.manual_seed(seed)
        _, labels = model.masked(ids)
        assert (labels != -100).sum(1).tolist() == [1, 0]
    nothing = model.loss(src[1:], tgt_out[1:], tgt_out[1:])  # a batch without a word: loss 0
    assert float(nothing.detach()) == 0.0
    nothing.backward()  # and a gradient of zeros, not NaN


def test_training_masks_from_torchs_stream_evaluation_from_a_fixed_mask_of_its_own():
    model = tiny_encoder()
    src, tgt = pair_batch(8, 10)
    args = (src, tgt[:, :-1], tgt[:, 1:])
    model.eval()
    before = torch.get_rng_state()
    first = model.loss_terms(*args)[0]
    assert torch.equal(torch.get_rng_state(), before)  # training's stream untouched
    torch.manual_seed(123)
    assert torch.equal(model.loss_terms(*args)[0], first)  # the same mask every time
    model.train()
    torch.manual_seed(5)
    a = model.loss_terms(*args)[0]
    b = model.loss_terms(*args)[0]
    torch.manual_seed(5)
    assert torch.equal(model.loss_terms(*args)[0], a)  # the seeded stream: the same mask
    assert not torch.equal(a, b)  # the stream moved on: another mask


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_is_bert_for_masked_lms_own_on_the_same_masked_ids(smoothing):
    model = tiny_encoder().eval()
    src, tgt = pair_batch(6, 12, seed=3)
    ids, types = model.joined(src, tgt[:, 1:])
    inputs, labels = model.masked(ids, torch.Generator().manual_seed(EVAL_MASK_SEED))
    model.lm.config.label_smoothing = smoothing
    with torch.no_grad():
        ours, zero = model.loss_terms(src, tgt[:, :-1], tgt[:, 1:], label_smoothing=smoothing)
        logits = model.lm(
            input_ids=inputs, attention_mask=(ids != 0).long(), token_type_ids=types
        ).logits  # (B, N, V + 1)
        theirs = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), label_smoothing=smoothing
        )
        if not smoothing:  # BertForMaskedLM's own loss: cross-entropy of the labels
            own = model.lm(
                input_ids=inputs, attention_mask=(ids != 0).long(), token_type_ids=types,
                labels=labels,
            ).loss  # fmt: skip
            assert torch.allclose(ours, own, atol=1e-5)
    assert torch.allclose(ours, theirs, atol=1e-5) and float(zero) == 0.0
    with pytest.raises(ValueError, match="no cross-attention"):
        model.loss_terms(src, tgt[:, :-1], tgt[:, 1:], align=object())


def test_fill_accuracy_counts_the_right_fills_of_the_fixed_mask():
    model = tiny_encoder()
    pairs = [([5, 6, 7, 2], [1, 8, 9, 2]), ([10, 11, 2], [1, 12, 13, 14, 2])]
    model.train()
    share = model.fill_accuracy(pairs)
    assert 0.0 <= share <= 1.0 and model.training  # its mode kept
    assert model.fill_accuracy(pairs) == share  # the fixed mask


def word_vocab() -> Vocab:
    """A word vocabulary of English and French words."""
    return Vocab.build([WORDS], 1, 100)


def trained_a_little(vocab: Vocab) -> EncoderTrainee:
    """An encoder over ``vocab`` after a few steps on two pairs (weights off their init)."""
    model = tiny_encoder(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    src = torch.tensor([vocab.encode(tokenize("i am cold .")) + [2]] * 4)
    tgt = torch.tensor([[1, *vocab.encode(tokenize("je suis froid .")), 2]] * 4)
    for _ in range(5):
        opt.zero_grad()
        model.loss(src, tgt[:, :-1], tgt[:, 1:]).backward()
        opt.step()
    return model.eval()


def test_its_folder_opens_in_transformers_with_equal_logits_and_a_mask_token(tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    vocab = word_vocab()
    model = trained_a_little(vocab)
    folder = export_folder(model, vocab, tmp_path / "best.hf")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"]
    assert config["attention_studio"] == {"task": "translation"}  # no prompt layout: no prompt
    assert tokenizer.mask_token == MASK and tokenizer.mask_token_id == len(vocab)
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id) == (Vocab.bos_id, Vocab.eos_id)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id) == (Vocab.pad_id, Vocab.unk_id)
    ids = tokenizer("I am [MASK].")["input_ids"]  # read as the corpus was: lower case, " ."
    assert ids == [1, *vocab.encode(["i", "am"]), len(vocab), vocab.stoi["."], 2]
    pair = tokenizer("i am cold .", "je suis froid .")
    assert pair["token_type_ids"] == [0] * 6 + [1] * 5
    lm = AutoModelForMaskedLM.from_pretrained(folder).eval()
    x = torch.tensor([pair["input_ids"]])
    types = torch.tensor([pair["token_type_ids"]])
    with torch.no_grad():
        theirs = lm(input_ids=x, token_type_ids=types).logits
        ours = model.lm(input_ids=x, token_type_ids=types).logits
    assert torch.allclose(theirs, ours, atol=1e-5)


def test_the_door_opens_it_as_the_masked_language_model_it_is(tmp_path):
    from core.model.opened import open_model
    from core.model.parts import DecodeSettings

    vocab = word_vocab()
    model = trained_a_little(vocab)
    folder = export_folder(model, vocab, tmp_path / "best.hf")
    door = open_model(str(folder))
    assert door.supports("translate") and door.mask_token == MASK
    sentence = f"i am {MASK} ."
    filled = door.translate(sentence, DecodeSettings())
    ids = [1, *vocab.encode(["i", "am"]), len(vocab), vocab.stoi["."], 2]
    assert filled.src_ids == ids
    model.lm.set_attn_implementation("eager")  # the path that returns weights
    with torch.no_grad():
        out = model.lm(input_ids=torch.tensor([ids]), output_attentions=True)
    assert filled.out_ids == [int(out.logits[0, 3].argmax())]  # the trainee's own fill
    maps = torch.stack(out.attentions)[:, 0]  # (L, H, S, S)
    assert torch.allclose(filled.attention.encoder, maps, atol=1e-5)


def test_a_bpe_vocabulary_gets_the_mask_past_its_pieces(tmp_path):
    from transformers import AutoTokenizer

    vocab = BPEVocab.train([WORDS, WORDS[::-1]], 60, 1)
    model = tiny_encoder(len(vocab)).eval()
    folder = export_folder(model, vocab, tmp_path / "bpe.hf")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.mask_token_id == len(vocab) == model.mask_id
    ids = tokenizer("Je suis [MASK] !")["input_ids"]
    assert ids[0] == Vocab.bos_id and ids[-1] == Vocab.eos_id and len(vocab) in ids
