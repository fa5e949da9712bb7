"""The decoder-only model the studio trains (``core.model.trainee``) and its ``save_pretrained``
folder (``core.model.trainee_folder``): the trainer's convention (concat(src, tgt_in), the
source left-padded), its attention and token losses as transformers computes them, its
checkpoint round trip, a folder any tool opens, and the studio's door reading an induction
model as it was trained ([bos, a, a]), where an induction head forms in a seeded CPU run."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch.nn import functional as F

from core.attention import head_detectors as hd
from core.corpus.vocab import SPECIALS, Vocab
from core.model.checkpoints import CheckpointError, read_checkpoint, save_checkpoint
from core.model.config import ModelConfig
from core.model.opened import open_model
from core.model.parts import DecodeSettings
from core.model.studio_loading import load_checkpoint
from core.model.trainee import DecoderTrainee, build_model
from core.model.trainee_folder import export_folder
from core.model.transformer import Transformer
from core.training.monitor import distributions, layer_groups, layer_norms

K = 16  # random token types of the tiny models


def tiny(kv: int = 0, dropout: float = 0.0, layers: int = 2, d: int = 32, heads: int = 4):
    """A decoder-only ModelConfig over the 4 specials and K tokens."""
    return ModelConfig(src_vocab_size=K + 4, tgt_vocab_size=K + 4, d_model=d, num_heads=heads,
                       num_kv_heads=kv, num_decoder_layers=layers, d_ff=2 * d, dropout=dropout,
                       max_positions=128, arch="decoder-only")  # fmt: skip


def token_vocab(k: int = K) -> Vocab:
    """The induction task's vocabulary: the specials, then t0 .. t{k-1}."""
    return Vocab(SPECIALS + [f"t{i}" for i in range(k)])


@pytest.fixture
def trainee() -> DecoderTrainee:
    torch.manual_seed(0)
    return DecoderTrainee(tiny(kv=2)).eval()


def repeated(n: int, b: int, seed: int, k: int = K) -> torch.Tensor:
    """(b, 2n + 1) [bos, a, a] of n distinct random tokens (ids 4 .. k+3) per row."""
    g = torch.Generator().manual_seed(seed)
    a = torch.stack([torch.randperm(k, generator=g)[:n] + 4 for _ in range(b)])  # (b, n)
    return torch.cat([torch.ones(b, 1, dtype=torch.long), a, a], dim=1)


# ----------------------------------------------------------------------------- the model


def test_build_model_asks_the_config_which_model():
    assert type(build_model(tiny())) is DecoderTrainee
    d2l = ModelConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, d_ff=16)
    assert type(build_model(d2l)) is Transformer
    with pytest.raises(ValueError, match="decoder-only"):
        DecoderTrainee(d2l)


def test_the_llama_is_built_from_the_model_config():
    c = DecoderTrainee(tiny(kv=2, dropout=0.1)).lm.config
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (32, 64, 2)
    assert (c.num_attention_heads, c.num_key_value_heads, c.max_position_embeddings) == (4, 2, 128)
    assert (c.attention_dropout, c.rms_norm_eps, c.tie_word_embeddings) == (0.1, 1e-5, False)
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id, c.vocab_size) == (0, 1, 2, K + 4)
    assert DecoderTrainee(tiny()).lm.config.num_key_value_heads == 4  # 0: every head its own


def test_loss_terms_read_the_source_then_the_target(trainee):
    """Each row's loss is the cross-entropy of tgt_out after [src without padding, tgt_in],
    read by the Llama alone: the source's right padding moved to its left changes nothing."""
    src = torch.tensor([[1, 5, 6, 0, 0], [1, 7, 8, 9, 10]])  # (2, 5) right-padded
    tgt_in = torch.tensor([[4, 5, 6, 0], [4, 5, 6, 7]])
    tgt_out = torch.tensor([[5, 6, 2, 0], [5, 6, 7, 2]])
    logits, targets = [], []
    for b in range(2):
        s, t_in, t_out = (x[b][x[b] != 0] for x in (src, tgt_in, tgt_out))
        logits.append(trainee.lm(input_ids=torch.cat([s, t_in])[None]).logits[0, len(s) :])
        targets.append(t_out)
    logits, targets = torch.cat(logits), torch.cat(targets)  # (N, V), (N,)
    with torch.no_grad():
        for smoothing in (0.0, 0.1):
            ce, align = trainee.loss_terms(src, tgt_in, tgt_out, label_smoothing=smoothing)
            want = F.cross_entropy(logits, targets, label_smoothing=smoothing)
            assert float(ce) == pytest.approx(float(want), abs=1e-5)
            assert float(align) == 0.0


def test_loss_terms_refuse_an_alignment_target(trainee):
    x = torch.tensor([[1, 5]])
    with pytest.raises(ValueError, match="cross-attention"):
        trainee.loss_terms(x, x, x, align=object())


def test_a_padded_batch_trains_without_nan():
    model = DecoderTrainee(tiny(dropout=0.2)).train()
    src = torch.tensor([[1, 5, 0, 0, 0, 0], [1, 7, 8, 9, 10, 11]])
    tgt = torch.tensor([[4, 5, 2, 0], [4, 5, 6, 2]])
    loss, _ = model.loss_terms(src, tgt[:, :-1], tgt[:, 1:])
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_patterns_are_the_llamas_own_attention(trainee):
    """(L, B, H, N, N) of eager attention, each row a distribution; training's SDPA is back
    after the call."""
    from transformers import LlamaForCausalLM

    ids = repeated(5, 3, seed=1)  # (3, 11)
    weights = trainee.patterns(ids)
    assert weights.shape == (2, 3, 4, 11, 11)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 4, 11), atol=1e-5)
    assert torch.equal(weights, weights.tril())  # causal
    ref = LlamaForCausalLM(copy.deepcopy(trainee.lm.config)).eval()
    ref.load_state_dict(trainee.lm.state_dict())
    ref.set_attn_implementation("eager")
    want = torch.stack(ref(input_ids=ids, output_attentions=True).attentions)
    assert torch.allclose(weights, want, atol=1e-6)
    assert trainee.lm.config._attn_implementation == "sdpa"  # read only: the test's check


def test_token_losses_are_each_next_tokens_loss(trainee):
    ids = repeated(4, 2, seed=2)  # (2, 9)
    losses = trainee.token_losses(ids)
    logp = trainee.lm(input_ids=ids).logits.log_softmax(-1)  # (2, 9, V)
    want = -logp[:, :-1].gather(2, ids[:, 1:, None])[..., 0]  # (2, 8)
    assert losses.shape == (2, 8)
    assert torch.allclose(losses, want, atol=1e-5)


def test_the_monitor_groups_a_llamas_parameters(trainee):
    """Every parameter in one group, in the forward order; norms and distributions of each."""
    groups = layer_groups(trainee)
    assert list(groups) == ["embedding", "decoder 0", "decoder 1", "final norm", "output layer"]
    grouped = [id(p) for ps in groups.values() for p in ps]
    assert sorted(grouped) == sorted(id(p) for p in trainee.parameters())
    assert set(layer_norms(trainee)["weights"]) == set(groups)
    assert set(distributions(trainee)["weights"]) == set(groups)


def test_the_monitor_groups_the_transformer_as_before():
    model = Transformer(ModelConfig(src_vocab_size=12, tgt_vocab_size=14, d_model=16, d_ff=16))
    assert list(layer_groups(model)) == [
        "source embedding",
        "target embedding",
        "encoder 0",
        "encoder 1",
        "decoder 0",
        "decoder 1",
        "output layer",
    ]


def test_a_checkpoint_round_trips_the_trainee(trainee, tmp_path):
    """The checkpoint's model_config rebuilds it (``build_model``) and its weights load."""
    vocab = token_vocab()
    save_checkpoint(tmp_path / "best.pt", trainee, vocab, vocab, step=3)
    ckpt = read_checkpoint(tmp_path / "best.pt")
    again = build_model(ModelConfig(**ckpt["model_config"])).eval()
    again.load_state_dict(ckpt["state_dict"])
    ids = repeated(3, 2, seed=4)
    assert type(again) is DecoderTrainee
    assert torch.equal(again.lm(input_ids=ids).logits, trainee.lm(input_ids=ids).logits)


# ----------------------------------------------------------------------------- the folder


def test_the_folder_opens_in_transformers_with_the_same_logits(trainee, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = export_folder(trainee, token_vocab(), tmp_path / "best.hf", task="induction")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        f.name for f in folder.iterdir()
    }
    lm = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok("t3 t7 t3 t7", return_tensors="pt")["input_ids"]
    assert ids.tolist() == [[1, 7, 11, 7, 11]]  # <bos>, then t3 = 4 + 3 ...
    assert tok.decode(ids[0], skip_special_tokens=True) == "t3 t7 t3 t7"
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert torch.allclose(lm(ids).logits, trainee.lm(input_ids=ids).logits, atol=1e-5)
    config = json.loads((folder / "config.json").read_text())
    assert config["attention_studio"] == {"task": "induction"}
    assert "attn_implementation" not in config and "_attn_implementation" not in config


def test_the_folder_holds_no_machine_path_and_is_replaced_whole(trainee, tmp_path):
    folder = tmp_path / "run" / "best.hf"
    folder.mkdir(parents=True)
    (folder / "stale.bin").write_text("from an older save")
    export_folder(trainee, token_vocab(), folder)
    assert not (folder / "stale.bin").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["best.hf"]  # nothing left over
    for file in folder.iterdir():
        assert str(tmp_path).encode() not in file.read_bytes(), file.name


def test_a_bpe_vocabulary_keeps_its_pieces(tmp_path):
    from transformers import AutoTokenizer

    from core.corpus.bpe import BPEVocab

    words = [s.split() for s in ["the cat sat", "the cats sat down", "a cat and the dog"] * 20]
    vocab = BPEVocab.train(words, size=40, min_freq=1)
    cfg = ModelConfig(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=16,
                      num_heads=2, num_decoder_layers=1, d_ff=16, arch="decoder-only")  # fmt: skip
    folder = export_folder(DecoderTrainee(cfg), vocab, tmp_path / "last.hf")
    tok = AutoTokenizer.from_pretrained(folder)
    _, want = vocab.segment(["the", "cats", "sat"])
    assert tok("the cats sat")["input_ids"] == [1, *want]
    assert tok.decode(tok("the cats sat")["input_ids"], skip_special_tokens=True) == "the cats sat"


# ----------------------------------------------------------------------------- the door


def test_the_door_reads_an_induction_folder_as_it_was_trained(trainee, tmp_path):
    """Head scores through ``open_model`` are those of the trainee's own attention on the same
    [bos, a, a] sequences: no prompt, no example sentence before them."""
    folder = export_folder(trainee, token_vocab(), tmp_path / "best.hf", task="induction")
    m = open_model(str(folder))
    n, b, seed = 5, 3, 7
    s = hd.head_scores(m, n, b, seed)
    rows = hd.random_tokens(m, n, b, seed)
    ids = torch.tensor([[1, *r, *r] for r in rows])  # (b, 2n + 1)
    with torch.no_grad():
        want = hd.scores_of(trainee.patterns(ids), n)
        losses = trainee.token_losses(ids).mean(0)  # (2n,)
    for name in hd.SCORES:
        assert torch.allclose(getattr(s, name), want[name], atol=1e-5), name
    assert torch.allclose(s.losses, losses, atol=1e-4)
    assert m.supports("translate") and "induction" in m.supports("translate")
    continued = m.translate("i'm home .", DecodeSettings(max_len=4))  # its start token, on
    assert "induction" in continued.warnings[0]
    with pytest.raises(CheckpointError, match="induction"):
        open_model(str(folder), prompt="Source: {src}\nTarget:")


def test_a_translation_folder_is_not_read_as_an_induction_model(trainee, tmp_path):
    folder = export_folder(trainee, token_vocab(), tmp_path / "best.hf")
    m = open_model(str(folder))
    assert m.supports("translate") is None and m.meta["task"] == "translation"


def test_a_decoder_only_checkpoint_opens_its_folder(trainee, tmp_path):
    """``<run>/best.pt`` of a decoder-only run opens ``<run>/best.hf``; without that folder,
    one line that names it; never a d2l Transformer built from its config."""
    vocab = token_vocab()
    save_checkpoint(tmp_path / "best.pt", trainee, vocab, vocab)
    with pytest.raises(CheckpointError, match=r"decoder-only.*best\.hf") as e:
        open_model(str(tmp_path / "best.pt"))
    assert "\n" not in str(e.value)
    with pytest.raises(CheckpointError, match="best.hf"):
        load_checkpoint(tmp_path / "best.pt")
    export_folder(trainee, vocab, tmp_path / "best.hf", task="induction")
    m = open_model(str(tmp_path / "best.pt"))
    assert m.cfg.num_decoder_layers == 2 and m.meta.get("task") == "induction"


@pytest.mark.slow
def test_an_induction_head_forms_and_the_door_sees_it(tmp_path):
    """A two-layer trainee, 150 seeded steps of Adam on [bos, a, a] (one thread), forms an
    induction head; read through its folder by the studio's head scores, as by its own
    patterns."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        k, n = 64, 16
        cfg = ModelConfig(src_vocab_size=k + 4, tgt_vocab_size=k + 4, d_model=64, num_heads=4,
                          num_decoder_layers=2, d_ff=128, dropout=0.0, max_positions=64,
                          arch="decoder-only")  # fmt: skip
        model = DecoderTrainee(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        for _ in range(150):
            a = torch.randint(4, k + 4, (32, n), generator=g)  # (32, n)
            src = torch.cat([torch.ones(32, 1, dtype=torch.long), a[:, :-1]], 1)  # [bos, a1..]
            tgt = torch.cat([a[:, -1:], a], 1)  # [a_n, a1 .. a_n]
            loss, _ = model.loss_terms(src, tgt[:, :-1], tgt[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        folder = export_folder(model, token_vocab(k), tmp_path / "best.hf", task="induction")
        s = hd.head_scores(open_model(str(folder)), n, 8, seed=0)
    finally:
        torch.set_num_threads(threads)
    assert float(s.induction.max()) >= 0.5
    assert s.repeat_loss < 1.0 < s.first_copy_loss
    rows = hd.random_tokens(open_model(str(folder)), n, 8, 0)
    with torch.no_grad():
        own = hd.scores_of(model.patterns(torch.tensor([[1, *r, *r] for r in rows])), n)
    assert torch.allclose(s.induction, own["induction"], atol=1e-5)
