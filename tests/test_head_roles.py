"""Head roles of an encoder-decoder, attention by attention (issue 65): on the shipped studio
translator and tiny Marian, BART and T5 with their hub checkpoints' flags, every score is the
mean of the model's own weights from ids (the studio Transformer's ``AttentionMaps``, Hugging
Face's ``output_attentions``); a head built to attend to the previous (or next) position is
named so; the command prints the page's figures; the Maps page draws one map per kind."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from core.attention.head_roles import REPEATED_TOKENS, ROLE_SHARE, head_roles, repeated_tokens
from core.model.checked_translation import translate_sentence
from core.model.parts import DecodeSettings
from tests import helpers

SETTINGS = DecodeSettings(max_len=8)
PAIRS = {  # a sentence and a translation it is fed back with, in each model's words
    "studio": ("i'm home .", "je suis chez moi ."),
    "hf": ("i am cold .", "je suis froid ."),
}
ROLE_SETS = {  # what each attention of an encoder-decoder can be
    "encoder": ["previous", "next", "first", "last", "duplicate", "induction"],
    "decoder_self": ["previous", "first", "duplicate", "induction"],
    "cross": ["first", "last"],
}


def shipped():
    """The shipped studio translator (skips where it was not trained yet)."""
    if not helpers.SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    from core.model.opened import open_model

    return open_model(str(helpers.SHIPPED))


def own_maps(m, src: list[int], tgt_in: list[int]) -> dict[str, np.ndarray]:
    """{kind: (L, H, Tq, Tk)} the model's own weights from ids: the studio Transformer's
    ``AttentionMaps``, or a Hugging Face model's ``output_attentions``."""
    s, t = torch.tensor([src]), torch.tensor([tgt_in])
    with torch.no_grad():
        if hasattr(m.model, "encoder") and hasattr(m.model.encoder, "pos_encoding"):
            _, maps = m.model(s, t, need_weights=True)
            kinds = (maps.encoder, maps.decoder_self, maps.cross)
        else:
            out = m.model(input_ids=s, decoder_input_ids=t, output_attentions=True)
            kinds = (out.encoder_attentions, out.decoder_attentions, out.cross_attentions)
    return {
        k: torch.stack(list(w))[:, 0].float().numpy()
        for k, w in zip(("encoder", "decoder_self", "cross"), kinds)
    }


def by_hand(w: np.ndarray, rows, keys) -> np.ndarray:
    """(L, H) the mean of (L, H, Tq, Tk) weights at (row, key), over the rows."""
    return np.stack([w[..., r, k] for r, k in zip(rows, keys)], -1).mean(-1)


@pytest.fixture(scope="module", params=("studio", "marian", "bart", "t5"))
def two_stacks(request, hf_models):
    """The shipped studio translator, or a tiny Hugging Face encoder-decoder."""
    if request.param == "studio":
        return request.param, shipped()
    from core.model.hf_model import load

    return request.param, load(hf_models[request.param])


def test_every_score_is_the_mean_of_the_models_own_weights(two_stacks):
    name, m = two_stacks
    sentence, target = PAIRS["studio" if name == "studio" else "hf"]
    t = m.force(sentence, target, SETTINGS)
    r = head_roles(m, t)
    assert [a.kind for a in r.attentions] == list(ROLE_SETS)
    for a in r.attentions:
        assert list(a.scores) == ROLE_SETS[a.kind]
    w = own_maps(m, t.src_ids, [m.start_id, *t.out_ids[:-1]])
    S, T = len(t.src_ids), len(t.out_ids)
    enc, dec, cross = r.of("encoder"), r.of("decoder_self"), r.of("cross")
    assert (enc.tokens, dec.tokens, cross.tokens) == (S, T, T)
    e, d, c = w["encoder"], w["decoder_self"], w["cross"]
    expected = {
        ("encoder", "previous"): by_hand(e, range(1, S), range(S - 1)),
        ("encoder", "next"): by_hand(e, range(S - 1), range(1, S)),
        ("encoder", "first"): by_hand(e, range(1, S), [0] * (S - 1)),
        ("encoder", "last"): by_hand(e, range(S - 1), [S - 1] * (S - 1)),
        ("decoder_self", "previous"): by_hand(d, range(1, T), range(T - 1)),
        ("decoder_self", "first"): by_hand(d, range(1, T), [0] * (T - 1)),
        ("cross", "first"): by_hand(c, range(T), [0] * T),
        ("cross", "last"): by_hand(c, range(T), [S - 1] * T),
    }
    for (kind, score), want in expected.items():
        assert np.allclose(r.of(kind).scores[score], want, atol=1e-6), (kind, score)
    # the repeated sequence: the encoder's source, the decoder's inputs, in one pass
    source, output = repeated_tokens(m)
    n = REPEATED_TOKENS
    assert len(set(source)) == len(set(output)) == n
    assert not (set(source) | set(output)) & (m.special_ids() | {m.unk_id})
    pre, post = m.framing([], target=False)
    twice = own_maps(m, [*pre, *source, *source, *post], [m.start_id, *output, *output])
    i = np.arange(n)
    for a, start in ((enc, len(pre)), (dec, 1)):
        own = twice[a.kind]
        second = start + n + i  # each token of the second copy; its first at start + i
        assert np.allclose(a.scores["duplicate"], by_hand(own, second, start + i), atol=1e-6)
        assert np.allclose(a.scores["induction"], by_hand(own, second, start + i + 1), atol=1e-6)
    rows = r.rows()
    assert len(rows) == sum(m.layers(k) for k in ROLE_SETS) * m.cfg.num_heads
    assert rows[0]["kind"] == "encoder" and set(rows[-1]) == {
        "kind", "layer", "head", "first", "last", "roles"}  # fmt: skip


def rotation(omegas: torch.Tensor, shift: int) -> torch.Tensor:
    """(2P, 2P) the map of each (sin pω, cos pω) pair of a sinusoidal position table to the
    pair of position p + ``shift``."""
    blocks = []
    for w in (omegas * shift).tolist():
        c, s = math.cos(w), math.sin(w)
        blocks.append(torch.tensor([[c, s], [-s, c]]))
    return torch.block_diag(*blocks)


def positional_head(attention, head: int, shift: int, sharp: float = 60.0) -> None:
    """Make one head of a studio attention read positions only: its query a position's table
    row, its key the table row ``shift`` further on, so that q·k peaks at the key ``shift``
    before the query (the layer's input must be the position table alone)."""
    D = attention.W_q.weight.size(1)
    Dh = D // attention.num_heads
    omegas = 1 / torch.pow(10000, torch.arange(0, D, 2, dtype=torch.float32) / D)[: Dh // 2]
    rows = slice(head * Dh, (head + 1) * Dh)
    with torch.no_grad():
        attention.W_q.weight[rows] = sharp * torch.eye(D)[:Dh]  # q_i = PE(i)[:Dh]
        attention.W_k.weight[rows] = rotation(omegas, shift) @ torch.eye(D)[:Dh]  # PE(j+shift)
        attention.W_q.bias[rows] = 0
        attention.W_k.bias[rows] = 0


def constructed_model():
    """A tiny post-LN studio Transformer with no token embeddings (each layer 0 reads the
    position table alone), decoder head 0 of layer 0 made a previous-token head, encoder head
    1 of layer 0 a previous-token head and encoder head 2 a next-token head."""
    from core.corpus.vocab import SPECIALS, Vocab
    from core.model.studio_model import StudioModel
    from core.model.transformer import Transformer

    torch.manual_seed(0)
    words = [f"w{i}" for i in range(40)]
    cfg = helpers.toy_model_config(
        src_vocab_size=len(SPECIALS) + 40,
        tgt_vocab_size=len(SPECIALS) + 40,
        d_model=32,
        num_heads=4,
        d_ff=64,
        norm_first=False,
    )  # Dh = 8: four frequencies of the table per head
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.encoder.embedding.weight.zero_()
        model.decoder.embedding.weight.zero_()
    positional_head(model.decoder.layers[0].self_attention, 0, 1)
    positional_head(model.encoder.layers[0].attention, 1, 1)
    positional_head(model.encoder.layers[0].attention, 2, -1)
    return StudioModel(model, Vocab(SPECIALS + words), Vocab(SPECIALS + words))


def test_a_head_built_to_read_the_previous_position_is_named_a_previous_token_head():
    m = constructed_model()
    t = m.force("w1 w2 w3 w4 w5 w6", "w6 w5 w4 w3 w2 w1", SETTINGS)
    r = head_roles(m, t)
    dec, enc = r.of("decoder_self"), r.of("encoder")
    assert dec.scores["previous"][0, 0] > 0.95 and "previous-token" in dec.roles(0, 0)
    assert enc.scores["previous"][0, 1] > 0.95 and "previous-token" in enc.roles(0, 1)
    assert enc.scores["next"][0, 2] > 0.95 and "next-token" in enc.roles(0, 2)
    assert "previous-token" not in enc.roles(0, 2) and "next-token" not in enc.roles(0, 1)
    others = [dec.scores["previous"][0, h] for h in (1, 2, 3)]
    assert max(others) < ROLE_SHARE  # the heads left as they were are not named so


def test_the_command_prints_the_figures_the_page_draws(capsys):
    from core.inside_head import main

    m = shipped()
    sentence = "i'm home ."
    assert main(["--checkpoint", str(helpers.SHIPPED), "--sentence", sentence,
                 "--head-roles"]) == 0  # fmt: skip
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    t = translate_sentence(m, sentence, DecodeSettings(beam_size=1))  # as the command does
    assert printed == head_roles(m, t).rows()
    assert {row["kind"] for row in printed} == set(ROLE_SETS)


def test_the_maps_page_draws_one_roles_map_per_kind_for_the_shipped_translator(
    shipped_model_dirs,
):
    from core.attention.kinds import kind_labels
    from tests.helpers import assert_clean, plain, run_page_script

    at = run_page_script("attention.py", {"sentence": "i'm home ."})
    assert_clean(at)
    shown = plain("\n".join(m.value for m in at.markdown))
    assert "What each head does" in shown
    titles = [  # a long title wraps: its line breaks read as spaces
        json.loads(c.proto.spec)["layout"]["title"]["text"].replace("<br>", " ")
        for c in at.get("plotly_chart")
    ]
    roles = [t for t in titles if t.startswith("What each head does")]
    labels = [kind_labels(k)[0] for k in ROLE_SETS]
    assert len(roles) == 3 and all(label in t for label, t in zip(labels, roles))
    assert all(label in shown for label in labels)  # each map named above it too


@pytest.mark.parametrize("shape, every", [((2, 4), True), ((9, 8), False)])
def test_the_roles_caption_says_which_values_are_written(shape, every):
    """The caption said "a value is written where it reaches 0.4" of a small grid whose every
    cell is written."""
    from core.attention.head_roles import AttentionRoles
    from core.figures.head_roles import head_roles_figure

    scores = np.linspace(0.0, 0.9, math.prod(shape)).reshape(shape)  # (L, H), some below 0.4
    fig = head_roles_figure(AttentionRoles("cross", {"first": scores, "last": scores}, 5, 0))
    said = json.dumps(fig.layout.to_plotly_json(), ensure_ascii=False)
    cells = [c for row in fig.data[0].text for c in row]
    assert all(cells) == every and any(cells)  # every cell written, or those from 0.4 on
    assert ("every value is written in its cell" in said) == every
    assert (f"a value is written where it reaches {ROLE_SHARE:g}" in said) == (not every)
