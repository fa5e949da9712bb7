"""Path patching and attribution patching (core.attention.path_patching,
core.attention.attribution_patching), checked against real patching on every family of the
conformance suite and the studio's model, and the command's lines (``python -m core.patch``)."""

from __future__ import annotations

import json

import pytest
import torch

from core import patch as patch_cmd
from core.attention import patch_sites, patching, patching_question
from core.attention.attribution_patching import attribution_patch
from core.attention.patch_sites import Component
from core.attention.patching import ask, patch
from core.attention.patching_question import last_logits
from core.attention.path_patching import LOGITS, every_head, parse_heads, path_patch
from core.model.parts import TranslationError
from core.model.studio_model import StudioModel
from tests import helpers
from tests.hf_tiny import CONFORMANCE
from tests.lm_tiny import LM_FAMILIES
from tests.test_conformance import studio, target_lang

FAMILIES = ("studio post-LN", "studio pre-LN", *CONFORMANCE, *LM_FAMILIES)
CLEAN, CORRUPT = "the cat sees the dog .", "the dog sees the cat ."  # the tiny trained model's


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, hf_loaded, lm_loaded):
    """(model, the question's keywords for ``patch``, clean, corrupt) for every family."""
    name = request.param
    if name.startswith("studio"):
        m = studio(name.endswith("pre-LN"))
    else:
        m = hf_loaded.get(name) or lm_loaded[name]
    if name in LM_FAMILIES:  # one length in every tiny vocabulary, one piece each answer
        return m, {"prefix": "", "answers": ("the", "he")}, "the boy is tall .", "you are tall ."
    asked = {"prefix": "", "answers": ("je", "tu"), "target_lang": target_lang(m)}
    return m, asked, "i am cold .", "you are tall ."


def last_head(m) -> Component:
    """The last head in the forward order: nothing but the output layer reads it."""
    kind = "cross" if "cross" in m.head_kinds else m.head_kinds[-1]
    return Component(kind, m.layers(kind) - 1, m.cfg.num_heads - 1)


# ----------------------------------------------------------------------------- path patching


def test_path_patching_to_the_logits_from_the_last_head_is_activation_patching(family):
    m, asked, clean, corrupt = family
    sender = last_head(m)
    path = path_patch(m, clean, corrupt, LOGITS, [sender], **asked)
    real = patch(m, clean, corrupt, [sender], **asked)
    assert path.patching.rows[0]["effect"] == pytest.approx(real.rows[0]["effect"], abs=1e-4)
    assert (path.patching.clean_metric, path.patching.corrupt_metric) == pytest.approx(
        (real.clean_metric, real.corrupt_metric), abs=1e-5
    )
    assert path.summary()["receivers"] == [LOGITS] and path.summary()["method"] == "path"


def test_receivers_upstream_of_the_sender_give_zero(family):
    m, asked, clean, corrupt = family
    sender = last_head(m)
    first = Component(m.head_kinds[0], 0, 0)  # read before the sender writes
    same_layer = Component(sender.kind, sender.layer, 0)  # a head of its own attention
    result = path_patch(m, clean, corrupt, [first, same_layer], [sender], **asked)
    assert result.patching.rows[0]["effect"] == pytest.approx(0.0, abs=1e-5)


def test_every_sender_through_the_logits_is_one_row_each(family):
    m, asked, clean, corrupt = family
    result = path_patch(m, clean, corrupt, LOGITS, **asked)
    assert [(r["kind"], r["layer"], r["head"]) for r in result.patching.rows] == [
        (c.kind, c.layer, c.head) for c in every_head(m)
    ]
    assert all(torch.isfinite(torch.tensor(r["effect"])) for r in result.patching.rows)


def _direct_effect_by_hand(m, q, sender: Component) -> float:
    """The sender's normalised effect with every other head's ``z`` and every MLP's output
    frozen at the receiving (corrupted) run's, written with hooks here, not by the library
    (one sender a pass: no batch)."""
    head_sites = {patch_sites.site(c, m) for c in every_head(m)}
    mlp_sites = {
        f"{side}.{i}.mlp_out"
        for side, stream in (("encoder", "encoder_stream"), ("decoder", "decoder_stream"))
        for i in range(m.layers(stream))
    } & set(m.hook_points())
    assert mlp_sites, "every family has an MLP output site"
    donor, receiver = q.runs
    runs, metrics = [], []
    with torch.no_grad():
        for source in (donor, receiver):
            seen = {}

            def keep(x, name, seen=seen):
                seen[name] = x.detach().clone()
                return x

            with m.hooks((s, keep) for s in head_sites | mlp_sites):
                metrics.append(float(q.metric(last_logits(m, source, q.tgt_in))[0]))
            runs.append(seen)
        clean_run, corrupt_run = runs

        def frozen(x, name):
            out = corrupt_run[name].clone()
            if name == patch_sites.site(sender, m):
                out[:, :, sender.head] = clean_run[name][:, :, sender.head]
            return out

        with m.hooks((s, frozen) for s in head_sites | mlp_sites):
            moved = float(q.metric(last_logits(m, receiver, q.tgt_in))[0])
    return (moved - metrics[1]) / (metrics[0] - metrics[1])


def test_with_the_mlps_frozen_a_path_to_the_logits_is_the_direct_effect(family):
    """Every head's path to the logits with ``freeze_mlps``: the sender's effect with every
    other head and every MLP frozen at the corrupted run, computed by hand."""
    m, asked, clean, corrupt = family
    result = path_patch(m, clean, corrupt, LOGITS, freeze_mlps=True, **asked)
    assert result.summary()["freeze_mlps"] is True
    with m.evaluating():
        q = ask(m, clean, corrupt, **asked)
        by_hand = [_direct_effect_by_hand(m, q, c) for c in every_head(m)]
    effects = [r["effect"] for r in result.patching.rows]
    gap = result.patching.gap  # compared in logits: a tiny gap (Marian's) scales float noise
    assert [e * gap for e in effects] == pytest.approx([e * gap for e in by_hand], abs=1e-5)
    assert any(abs(e) > 1e-3 for e in effects)  # not all zero: the check can fail


def test_rows_of_a_path_batch_do_not_touch_each_other(tiny_model, monkeypatch):
    receivers = [Component("cross", tiny_model.layers("cross") - 1, 0)]
    together = path_patch(tiny_model, CLEAN, CORRUPT, receivers).patching.rows
    monkeypatch.setattr("core.attention.path_patching.ROWS", 1)
    alone = path_patch(tiny_model, CLEAN, CORRUPT, receivers).patching.rows
    assert [r["effect"] for r in together] == pytest.approx([r["effect"] for r in alone], abs=1e-5)


@pytest.mark.parametrize(
    "typed, message",
    [
        ("", "Name the receivers"),
        ("1.2", "is not a head"),  # three kinds: the kind must be named
        ("cross:9.0", "no head cross:9.0"),
        ("cross:0.99", "no head cross:0.99"),
        ("cross:a.b", "is not a head"),
        ("sideways:0.0", "is not a head"),
    ],
)
def test_receivers_that_are_not_heads_are_one_line(tiny_model, typed, message):
    with pytest.raises(TranslationError, match=message) as e:
        parse_heads(tiny_model, typed)
    assert "\n" not in str(e.value)


def test_a_one_stack_model_takes_heads_as_layer_dot_head(lm_loaded):
    lm = lm_loaded["gpt2"]
    assert parse_heads(lm, "0.1, 1.0") == [Component("decoder_self", 0, 1),
                                           Component("decoder_self", 1, 0)]  # fmt: skip
    assert parse_heads(lm, " Logits ") == LOGITS


def test_path_patching_is_refused_before_any_pass_past_the_bytes(tiny_model, monkeypatch):
    from core.runs import budget

    monkeypatch.setattr(budget, "PATCH_BYTES", 1)
    monkeypatch.setattr(patching, "last_logits", lambda *a: pytest.fail("computed"))
    monkeypatch.setattr(patching_question, "last_logits", lambda *a: pytest.fail("computed"))
    monkeypatch.setattr(
        "core.attention.path_patching.last_logits", lambda *a: pytest.fail("computed")
    )
    with pytest.raises(TranslationError, match="one pass may hold at most"):
        path_patch(tiny_model, CLEAN, CORRUPT, LOGITS)


# ----------------------------------------------------------------------------- attribution


def test_the_estimate_is_exact_where_the_metric_is_linear_in_the_activation():
    """The last layer's output at the step read, where the output layer has no norm (the
    studio's post-LN Transformer; every other family has a final norm): logits are linear in
    it, so the estimate is the effect."""
    m = studio(norm_first=False)
    step = 0  # the prefix given is empty
    chosen = [Component("decoder_stream", m.layers("decoder_stream") - 1, position=step)]
    asked = {"prefix": "", "answers": ("je", "tu")}
    result = attribution_patch(m, "i am cold .", "you are tall .", chosen, **asked)
    row = result.patching.rows[0]
    assert row["estimate"] == pytest.approx(row["effect"], abs=1e-5)
    assert row["effect"] == pytest.approx(1.0, abs=1e-5)


def _metric_moved(m, q, c: Component, eps: float) -> float:
    """The receiving run's metric with ``c`` moved ``eps`` of the way to the donor's value (a
    pattern: the head's output moved by eps (P_donor - P_receiver) @ v, what the pattern
    makes of it)."""
    site, reads = patch_sites.site(c, m), patch_sites.read_sites(c, m)
    donor, receiver = q.runs
    prefix = site.rsplit(".", 1)[0]
    with torch.no_grad():
        _, d = patching._recorded(m, reads, donor, q.tgt_in)
        values = [f"{prefix}.v"] if c.kind in patching.KINDS else []
        _, r = patching._recorded(m, [*reads, site, *values], receiver, q.tgt_in)
    where = slice(None) if c.position is None else c.position

    def hook(x, name):
        x = x.clone()
        if c.kind in patching.KINDS and c.activation == "pattern":
            v = r[f"{prefix}.v"]  # (1, Tk, Hkv, Dh)
            kv = c.head // (m.cfg.num_heads // v.size(2))
            moved = (d[reads[0]] - r[reads[0]])[0, c.head] @ v[0, :, kv]  # (Tq, Dh)
            x[:, :, c.head] = r[site][:, :, c.head] + eps * moved
        elif c.kind in patching.KINDS:
            h = c.head // (m.cfg.num_heads // x.size(2))
            x[:, where, h] = r[site][:, where, h] + eps * (d[site] - r[site])[:, where, h]
        else:
            x[:, where] = r[site][:, where] + eps * (d[site] - r[site])[:, where]
        return x

    with torch.no_grad(), m.hooks([(site, hook)]):
        return float(q.metric(last_logits(m, receiver, q.tgt_in))[0])


def _every_kind(m) -> list[Component]:
    """A component of every kind patching offers on this model: heads whole, at a position,
    their q, k, v and pattern, an MLP's output (where the model has the site) and the stream."""
    kind = m.head_kinds[0]
    chosen = [Component(kind, 0, 0), last_head(m), Component(kind, 0, 1, position=1)]
    chosen += [Component(kind, 0, 1, activation=a) for a in patch_sites.HEAD_ACTIVATIONS[1:]]
    chosen += [
        Component("decoder_stream", 0, position=0),
        Component("encoder_stream", 0, position=1),
    ]
    points = m.hook_points()
    chosen += [
        Component(mlp, 0, position=0)
        for mlp in patch_sites.MLPS
        if patch_sites.site(Component(mlp, 0), m) in points
    ]
    return chosen


def test_the_estimate_is_the_first_order_term_by_finite_differences(family):
    m, asked, clean, corrupt = family
    chosen = _every_kind(m)
    result = attribution_patch(m, clean, corrupt, chosen, exact=False, **asked)
    gap = result.patching.gap
    with m.evaluating():
        q = ask(m, clean, corrupt, **asked)
        for c, row in zip(chosen, result.patching.rows):
            h = 1e-3  # small enough not to cross a ReLU's kink, large for float32's noise
            slope = (_metric_moved(m, q, c, h) - _metric_moved(m, q, c, -h)) / (2 * h)
            assert row["estimate"] * gap == pytest.approx(slope, rel=2e-2, abs=5e-3), row
            assert row["effect"] is None
    assert result.spearman is None and result.largest_error is None


def test_attribution_patching_lists_what_activation_patching_lists(tiny_model):
    result = attribution_patch(tiny_model, CLEAN, CORRUPT)
    real = patch(tiny_model, CLEAN, CORRUPT)
    rows = result.patching.rows
    assert [{k: v for k, v in r.items() if k != "estimate"} for r in rows] == real.rows
    numbers = ("clean_metric", "corrupt_metric", "gap")
    ours, theirs = result.patching.summary(), real.summary()
    assert [ours.pop(k) for k in numbers] == pytest.approx([theirs.pop(k) for k in numbers])
    assert ours == theirs
    errors = [abs(r["estimate"] - r["effect"]) for r in rows]
    assert result.largest_error == pytest.approx(max(errors))
    assert -1.0 <= result.spearman <= 1.0
    noised = attribution_patch(tiny_model, CLEAN, CORRUPT, direction="noise", exact=False)
    swapped = attribution_patch(tiny_model, CORRUPT, CLEAN, exact=False)
    assert noised.patching.prefix == swapped.patching.prefix
    assert [r["estimate"] for r in noised.patching.rows] == pytest.approx(
        [r["estimate"] for r in swapped.patching.rows], abs=1e-5
    )  # noising is denoising with the sentences swapped, to first order too


def test_a_backward_pass_past_the_bytes_is_refused_before_it_runs(tiny_model, monkeypatch):
    from core.attention import attribution_patching
    from core.runs import budget

    found = patch(tiny_model, CLEAN, CORRUPT, [])
    row = budget.patch_row_bytes(vars(tiny_model.cfg), len(found.clean), len(found.prefix))
    monkeypatch.setattr(budget, "PATCH_BYTES", 2 * row)  # one row fits, a backward pass not
    monkeypatch.setattr(attribution_patching, "estimates", lambda *a: pytest.fail("ran"))
    with pytest.raises(TranslationError, match="in its backward pass; one pass may hold"):
        attribution_patch(tiny_model, CLEAN, CORRUPT, exact=False)


def test_attribution_patching_on_the_shipped_model_ranks_as_real_patching():
    """Reported, not asserted beyond a sane floor: the figures are in bench/README.md."""
    if not helpers.SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    m = StudioModel.load(helpers.SHIPPED)
    result = attribution_patch(m, "the boy is tall .", "the girl is tall .")
    print(f"shipped: Spearman {result.spearman:.3f}, largest error {result.largest_error:.3f}")
    assert result.spearman > 0.3


# ----------------------------------------------------------------------------- the command


def test_the_command_prints_the_librarys_lines_for_each_method(tiny_checkpoint, capsys):
    m = StudioModel.load(tiny_checkpoint)
    args = ["--checkpoint", str(tiny_checkpoint), "--clean", CLEAN, "--corrupt", CORRUPT]
    assert patch_cmd.main([*args, "--method", "attribution"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    estimated = attribution_patch(m, CLEAN, CORRUPT)
    assert lines[:-1] == estimated.patching.rows and lines[-1] == estimated.summary()
    assert {"spearman", "largest_error"} <= set(lines[-1])
    receivers = "cross:1.0,cross:1.1"
    assert patch_cmd.main([*args, "--sender", "encoder:0.1", "--receivers", receivers]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    path = path_patch(m, CLEAN, CORRUPT, parse_heads(m, receivers), parse_heads(m, "encoder:0.1"))
    assert lines[:-1] == path.patching.rows and lines[-1] == path.summary()
    assert patch_cmd.main([*args, "--receivers", "logits"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(every_head(m)) + 1
    assert patch_cmd.main([*args, "--receivers", "cross:7.0"]) == 2
    err = capsys.readouterr().err
    assert "no head cross:7.0" in err and err.count("\n") == 1
    assert patch_cmd.main([*args, "--sender", "encoder:0.1"]) == 2
    assert "--method path need --receivers" in capsys.readouterr().err
    assert patch_cmd.main([*args, "--freeze-mlps"]) == 2
    assert "--freeze-mlps and --method path need" in capsys.readouterr().err
    assert patch_cmd.main([*args, "--receivers", "logits", "--freeze-mlps"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    direct = path_patch(m, CLEAN, CORRUPT, LOGITS, freeze_mlps=True)
    assert lines[:-1] == direct.patching.rows and lines[-1] == direct.summary()
    assert lines[-1]["freeze_mlps"] is True
    assert patch_cmd.main([*args, "--method", "attribution", "--receivers", "logits"]) == 2
    assert "not --method attribution" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the page


def test_the_patching_section_offers_the_estimate_and_the_paths(studio_dirs):
    from tests.helpers import assert_clean, plain, run_page_script

    at = run_page_script("attention.py", {"sentence": CLEAN, "section": "patch"})
    at.text_input(key="at_corrupt").set_value(CORRUPT).run()
    assert_clean(at)
    assert len(at.get("plotly_chart")) == 2  # activation patching, as before
    at.radio(key="at_patch_method").set_value("attribution").run()
    assert_clean(at)
    shown = plain(" ".join(m.value for m in at.markdown))
    assert "against real patching: Spearman" in shown and "largest absolute error" in shown
    assert len(at.get("plotly_chart")) == 4  # the estimate's grids beside the real ones
    assert at.query_params["patch_method"] == "attribution"
    at.radio(key="at_patch_method").set_value("path").run()
    assert_clean(at)
    assert "through logits only" in plain(" ".join(m.value for m in at.markdown))
    assert len(at.get("plotly_chart")) == 1
    at.text_input(key="at_patch_receivers").set_value("cross:9.0").run()
    errors = [plain(e.value) for e in at.error]
    assert len(errors) == 1 and "no head cross:9.0" in errors[0] and "\n" not in errors[0]
    at.text_input(key="at_patch_receivers").set_value("cross:1.0, cross:1.1").run()
    assert_clean(at)
    assert "through cross:1.0, cross:1.1 only" in plain(" ".join(m.value for m in at.markdown))
    assert at.query_params["patch_receivers"] == "cross:1.0, cross:1.1"
    assert "MLPs recomputed" in plain(" ".join(m.value for m in at.markdown))
    at.checkbox(key="at_patch_freeze_mlps").check().run()
    assert_clean(at)
    assert "MLPs frozen too" in plain(" ".join(m.value for m in at.markdown))
    assert at.query_params["patch_freeze_mlps"] == "1"
