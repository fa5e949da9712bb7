"""Patching at every site and per position (``core.attention.patching``'s ``SELECTIONS``): a
head's output at one position, its q, k, v and pattern, each MLP's output per position, on
every family of the conformance suite (the studio model, the tiny Hugging Face
encoder-decoders and decoder-only models with their real checkpoints' flags): patching a run
with its own activations changes nothing, a site the metric cannot read gives 0, and the
grid equals a patch made by hand with forward hooks on the raw modules (GPT-2 and the studio
model, both directions)."""

from __future__ import annotations

import json

import pytest
import torch

from core import patch as patch_cmd
from core.attention import patch_sites, patching, patching_question
from core.attention.patch_sites import Component
from core.attention.patching import DIRECTIONS, SELECTIONS, patch
from core.attention.patching_question import last_logits
from core.model.parts import TranslationError
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import LM_FAMILIES

PAIRS = {  # (clean, corrupt, answers): one length in pieces in each tiny vocabulary
    "studio": ("the cat sees the dog .", "the dog sees the cat .", None),
    "hf": ("the boy is tall .", "the girl is tall .", ("garçon", "fille")),
    "lm": ("the boy is tall .", "you are tall .", ("the", "he")),
}
FAMILIES = ("studio", *CONFORMANCE, *LM_FAMILIES)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture
def model(family, request):
    if family == "studio":
        return request.getfixturevalue("tiny_model")
    if family in LM_FAMILIES:
        return request.getfixturevalue("lm_loaded")[family]
    return request.getfixturevalue("hf_loaded")[family]


def pair_of(family: str) -> tuple:
    return PAIRS["studio" if family == "studio" else "lm" if family in LM_FAMILIES else "hf"]


def question(m, family: str):
    """(clean (1, S), corrupted (1, S), decoder inputs (1, T), answer ids) as ``patch`` asks."""
    clean, corrupt, answers = pair_of(family)
    (a, _), (b, _) = patching_question.checked_sources(m, clean, corrupt)
    sources = torch.tensor([a]), torch.tensor([b])
    with torch.no_grad(), m.evaluating():
        if answers is None:
            tgt_in, ids = patching_question.found_question(m, sources, 20)
        else:
            prefix = "" if family in LM_FAMILIES else "le"  # the decoder: two steps
            tgt_in, ids = patching_question.given_question(m, sources, prefix, answers)
    return (*sources, tgt_in, ids)


def metrics_of(m, todo, donor, receiver, tgt_in, ids) -> tuple[float, torch.Tensor]:
    """(the donor run's metric, (len(todo),) the receiving run's with each component patched
    from the donor)."""
    reads = list(dict.fromkeys(s for c in todo for s in patch_sites.read_sites(c, m)))
    out = []
    with torch.no_grad(), m.evaluating():
        logits, seen = patching._recorded(m, reads, donor, tgt_in)
        for start in range(0, len(todo), 64):
            chunk = todo[start : start + 64]
            out.append(patching.patched_metrics(m, chunk, seen, receiver, tgt_in, ids))
    return float(logits[0, ids[0]] - logits[0, ids[1]]), torch.cat(out)


def test_patching_every_site_with_the_runs_own_activations_changes_nothing(model, family):
    src, _, tgt_in, ids = question(model, family)
    todo, sequence = patching._check_count(
        model, list(SELECTIONS), src[0].tolist(), tgt_in[0].tolist(), None
    )
    activations = {c.activation for c in todo if c.kind in patching.KINDS}
    assert activations == set(patch_sites.HEAD_ACTIVATIONS)
    assert {c.kind for c in todo} >= {"decoder_mlp", "decoder_stream"}
    assert (sequence is None) == (family not in LM_FAMILIES)  # heads span the whole sequence
    own, metrics = metrics_of(model, todo, src, src, tgt_in, ids)
    assert torch.allclose(metrics, torch.full_like(metrics, own), atol=2e-5), family


def test_a_site_the_metric_cannot_read_gives_zero(model, family):
    clean, corrupt, tgt_in, ids = question(model, family)
    N = tgt_in.size(1)
    sequence = patching.whole_sequence(model, corrupt[0].tolist(), tgt_in[0].tolist())
    N = len(sequence) if sequence is not None else N
    last = model.layers("decoder_stream") - 1
    kinds = [k for k in model.head_kinds if k != "encoder"]
    earlier = range(N - 1)  # the last layer's positions before the one the logits read
    todo = [Component(k, last, h, p) for k in kinds for h in (0, 1) for p in earlier]
    todo += [Component(k, last, h, p, "q") for k in kinds for h in (0, 1) for p in earlier]
    todo += [Component("decoder_mlp", last, position=p) for p in earlier]
    assert len(todo) >= 9, family
    _, metrics = metrics_of(model, todo, clean, corrupt, tgt_in, ids)
    with torch.no_grad(), model.evaluating():
        logits = last_logits(model, corrupt, tgt_in)
    own = float(logits[0, ids[0]] - logits[0, ids[1]])
    assert torch.allclose(metrics, torch.full_like(metrics, own), atol=2e-5), family
    whole = [Component(k, last, 0, N - 1) for k in kinds]  # the position the logits read
    _, changed = metrics_of(model, whole, clean, corrupt, tgt_in, ids)
    assert not torch.allclose(changed, torch.full_like(changed, own), atol=1e-6)


# ----------------------------------------------------------------------------- by hand


def by_hand(m, where: list, donor, receiver, tgt_in, ids) -> float:
    """The receiving run's metric with ``where`` patched from the donor by forward hooks on
    the raw modules: (module, "out" | "in", index into the (B, N, ·) tensor) each."""
    kept: dict[int, torch.Tensor] = {}

    def keep(i):
        return lambda mod, args, out=None: kept.__setitem__(
            i, (out if out is not None else args[0]).clone()
        )

    def write(i, index):
        def put(mod, args, out=None):
            x = (out if out is not None else args[0]).clone()
            x[index] = kept[i][index]
            return x if out is not None else (x, *args[1:])

        return put

    def run(src, hooks) -> torch.Tensor:
        handles = [
            mod.register_forward_hook(fn) if end == "out" else mod.register_forward_pre_hook(fn)
            for mod, end, fn in hooks
        ]
        try:
            with torch.no_grad(), m.evaluating():
                return last_logits(m, src, tgt_in)
        finally:
            for h in handles:
                h.remove()

    run(donor, [(mod, end, keep(i)) for i, (mod, end, _) in enumerate(where)])
    logits = run(receiver, [(mod, end, write(i, ix)) for i, (mod, end, ix) in enumerate(where)])
    return float(logits[0, ids[0]] - logits[0, ids[1]])


def effect(result, metric: float) -> float:
    """A metric normalised as ``patch`` normalises it, in its direction."""
    if result.direction == "denoise":
        return (metric - result.corrupt_metric) / result.gap
    return (result.clean_metric - metric) / result.gap


def head_slice(h: int, Dh: int, offset: int = 0) -> slice:
    return slice(offset + h * Dh, offset + (h + 1) * Dh)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_grid_equals_a_patch_by_hand_on_gpt2(lm_loaded, direction):
    m = lm_loaded["gpt2"]
    clean_s, corrupt_s, answers = PAIRS["lm"]
    clean, corrupt, tgt_in, ids = question(m, "gpt2")
    N = len(patching.whole_sequence(m, corrupt[0].tolist(), tgt_in[0].tolist()))
    blocks, D = m.model.transformer.h, m.model.config.n_embd
    Dh = D // m.model.config.n_head
    c_attn = lambda i: blocks[i].attn.c_attn  # noqa: E731 (q, k, v side by side: (B, N, 3D))
    cases = {
        Component("decoder_self", 0, 1, activation="q"): [
            (c_attn(0), "out", (..., head_slice(1, Dh)))
        ],
        Component("decoder_self", 1, 2, activation="k"): [
            (c_attn(1), "out", (..., head_slice(2, Dh, D)))
        ],
        Component("decoder_self", 0, 3, activation="v"): [
            (c_attn(0), "out", (..., head_slice(3, Dh, 2 * D)))
        ],
        Component("decoder_self", 0, 2, activation="pattern"): [  # the weights: q and k alone
            (c_attn(0), "out", (..., head_slice(2, Dh))),
            (c_attn(0), "out", (..., head_slice(2, Dh, D))),
        ],
        Component("decoder_self", 1, 0, N - 1): [
            (blocks[1].attn.c_proj, "in", (slice(None), N - 1, head_slice(0, Dh)))
        ],
        **{
            Component("decoder_self", 0, 3, p): [
                (blocks[0].attn.c_proj, "in", (slice(None), p, head_slice(3, Dh)))
            ]
            for p in range(N)
        },
        **{
            Component("decoder_mlp", 0, position=p): [(blocks[0].mlp, "out", (slice(None), p))]
            for p in range(N)
        },
    }
    result = patch(
        m, clean_s, corrupt_s, list(cases), prefix="", answers=answers, direction=direction
    )
    donor, receiver = (clean, corrupt) if direction == "denoise" else (corrupt, clean)
    for row, (c, where) in zip(result.rows, cases.items()):
        expected = effect(result, by_hand(m, where, donor, receiver, tgt_in, ids))
        assert row["effect"] == pytest.approx(expected, rel=1e-4, abs=1e-4), (c, row)
    assert len(result.sequence) == N


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_grid_equals_a_patch_by_hand_on_the_studio_model(tiny_model, direction):
    m = tiny_model
    clean_s, corrupt_s, _ = PAIRS["studio"]
    clean, corrupt, tgt_in, ids = question(m, "studio")
    S, T = clean.size(1), tgt_in.size(1)
    net = m.model
    Dh = net.cfg.d_model // net.cfg.num_heads
    cases = {}
    for p in range(S):
        cases[Component("encoder", 0, 1, p)] = [
            (net.encoder.layers[0].attention.W_o, "in", (slice(None), p, head_slice(1, Dh)))
        ]
        cases[Component("encoder_mlp", 1, position=p)] = [
            (net.encoder.layers[1].ffn, "out", (slice(None), p))
        ]
    for p in range(T):
        for kind, attr in (("decoder_self", "self_attention"), ("cross", "cross_attention")):
            w_o = getattr(net.decoder.layers[0], attr).W_o
            cases[Component(kind, 0, 2, p)] = [(w_o, "in", (slice(None), p, head_slice(2, Dh)))]
        cases[Component("decoder_mlp", 0, position=p)] = [
            (net.decoder.layers[0].ffn, "out", (slice(None), p))
        ]
    result = patch(m, clean_s, corrupt_s, list(cases), direction=direction)
    donor, receiver = (clean, corrupt) if direction == "denoise" else (corrupt, clean)
    for row, (c, where) in zip(result.rows, cases.items()):
        expected = effect(result, by_hand(m, where, donor, receiver, tgt_in, ids))
        assert row["effect"] == pytest.approx(expected, rel=1e-4, abs=1e-4), (c, row)


def test_the_pattern_of_a_head_is_its_q_and_k_together(tiny_model):
    clean_s, corrupt_s, _ = PAIRS["studio"]
    chosen = [
        Component(kind, layer, 1, activation=a)
        for kind in ("encoder", "decoder_self", "cross")
        for layer in (0, 1)
        for a in ("pattern", "q", "k")
    ]
    rows = patch(tiny_model, clean_s, corrupt_s, chosen).rows
    assert {r["activation"] for r in rows} == {"pattern", "q", "k"}
    for i in range(0, len(rows), 3):  # one patch of q and k at once, by hand
        c = chosen[i]
        both = [
            Component(c.kind, c.layer, 1, activation="q"),
            Component(c.kind, c.layer, 1, activation="k"),
        ]
        clean, corrupt, tgt_in, ids = question(tiny_model, "studio")
        reads = [patch_sites.site(x, tiny_model) for x in both]
        with torch.no_grad(), tiny_model.evaluating():
            _, seen = patching._recorded(tiny_model, reads, clean, tgt_in)
            hooks = [(s, patching._patch_hook([(0, x)], seen[s])) for x, s in zip(both, reads)]
            with tiny_model.hooks(hooks):
                logits = last_logits(tiny_model, corrupt, tgt_in)
            metric = float(logits[0, ids[0]] - logits[0, ids[1]])
            m_clean = float(last_logits(tiny_model, clean, tgt_in)[0, ids].diff()) * -1
            m_corrupt = float(last_logits(tiny_model, corrupt, tgt_in)[0, ids].diff()) * -1
        assert rows[i]["effect"] == pytest.approx(
            (metric - m_corrupt) / (m_clean - m_corrupt), abs=1e-4
        )


# ----------------------------------------------------------------------------- the command


def test_the_command_patches_what_sites_chooses(tiny_checkpoint, capsys):
    clean, corrupt, _ = PAIRS["studio"]
    args = ["--checkpoint", str(tiny_checkpoint), "--clean", clean, "--corrupt", corrupt]
    assert patch_cmd.main([*args, "--sites", "heads_positions", "mlp_positions"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    rows = lines[:-1]
    assert {r["kind"] for r in rows} == {
        "encoder",
        "decoder_self",
        "cross",
        "encoder_mlp",
        "decoder_mlp",
    }
    assert all("position" in r for r in rows) and all("effect" in r for r in rows)
    assert patch_cmd.main([*args, "--sites", "head_parts"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()][:-1]
    assert {r["activation"] for r in rows} == {"q", "k", "v", "pattern"}
    assert patch_cmd.main([*args, "--sites", "neurons"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_too_many_components_are_refused_in_one_line_before_any_pass(tiny_model, monkeypatch):
    def no_pass(*args, **kwargs):
        raise AssertionError("a pass ran")

    monkeypatch.setattr(patching, "MAX_COMPONENTS", 10)
    monkeypatch.setattr(patching, "last_logits", no_pass)
    monkeypatch.setattr(patching_question, "last_logits", no_pass)
    monkeypatch.setattr(type(tiny_model), "greedy", no_pass)
    clean, corrupt, _ = PAIRS["studio"]
    with pytest.raises(TranslationError, match="components") as e:
        patch(tiny_model, clean, corrupt, selection=("heads_positions",))
    assert "\n" not in str(e.value) and "at most 10" in str(e.value)
    with pytest.raises(TranslationError, match="one of"):
        patch(tiny_model, clean, corrupt, selection=("neurons",))


# ----------------------------------------------------------------------------- the page


def test_the_page_patches_what_the_picker_chooses(studio_dirs):
    from tests.helpers import assert_clean, run_page_script

    clean, corrupt, _ = PAIRS["studio"]
    at = run_page_script("attention.py", {"sentence": clean, "section": "patch"})
    at.text_input(key="at_corrupt").set_value(corrupt).run()
    assert_clean(at)
    assert len(at.get("plotly_chart")) == 2  # heads and the stream, as before
    drawn = {}
    for pick in ("heads_positions", "head_parts", "mlp_positions", "stream_positions", "heads"):
        at.radio(key="at_patch_sites").set_value(pick).run()
        assert_clean(at)
        assert at.query_params["patch_sites"] == pick
        charts = at.get("plotly_chart")
        drawn[pick] = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts]
    assert "one position at a time" in drawn["heads_positions"][0]
    assert "q, k, v and pattern" in drawn["head_parts"][0]
    assert "one position at a time" in drawn["mlp_positions"][0]
    assert "residual stream" in drawn["stream_positions"][0]
    assert len(drawn["heads"]) == 1 and "each head's output" in drawn["heads"][0]


def test_typed_words_reach_the_positions_figure_as_text():
    from core.figures.patching import positions_figure

    rows = [
        {"kind": "encoder", "layer": 0, "head": 1, "position": p, "effect": 0.5} for p in (0, 1)
    ]
    rows += [{"kind": "decoder_mlp", "layer": 1, "position": 0, "effect": -0.2}]
    axes = {"encoder": ["<b>x</b>", "<eos>"], "decoder_mlp": ["<bos>"]}
    fig = positions_figure(rows, axes, "<i>about</i>")
    assert [list(t.y) for t in fig.data] == [["0.1"], ["1"]]
    assert [str(x) for x in fig.data[0].x] == ["0:&lt;b&gt;x&lt;/b&gt;", "1:&lt;eos&gt;"]
    assert "<i>" not in fig.layout.title.text


# ----------------------------------------------------------------------------- the q and k sites


@pytest.mark.parametrize("kind", ["encoder", "cross"])
def test_the_q_and_k_sites_give_each_encoder_decoders_own_weights(model, family, kind):
    if family in LM_FAMILIES:  # tests/test_one_stack_sites.py checks theirs
        pytest.skip("a one-stack model's sites are checked over its whole sequence")
    from core.model.architectures import architecture_of
    from core.model.sites import attention_modules

    src, _, tgt_in, _ = question(model, family)
    names = [
        f"{patch_sites.head_site(kind, i, model)}.{part}" for i in (0, 1) for part in ("q", "k")
    ]
    names += [
        f"{patch_sites.head_site(kind, i, model)}.{p}"
        for i in (0, 1)
        for p in ("pattern", "position_bias")
    ]
    points = model.hook_points()
    with torch.no_grad(), model.evaluating():
        seen = model.captured(src, tgt_in, [n for n in names if n in points])
    for i in (0, 1):
        p = patch_sites.head_site(kind, i, model)
        q, k = seen[f"{p}.q"], seen[f"{p}.k"]  # (1, Tq, H, Dh), (1, Tk, H, Dh)
        if family == "studio":
            scale = q.size(-1) ** -0.5
        else:
            scale = architecture_of(model.model).scale_of(attention_modules(model.model, kind)[i])
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale  # (1, H, Tq, Tk)
        if seen.get(f"{p}.position_bias") is not None:  # T5's relative bias
            scores = scores + seen[f"{p}.position_bias"]
        assert torch.allclose(scores.softmax(-1), seen[f"{p}.pattern"], atol=1e-5), (family, p)
