"""Activation patching (Meng et al. 2022; Wang et al. 2023): which heads, and which positions
of the residual stream, carry what differs between two source sentences.

One component's activation of one run is written into the other, one component per batch
row, for the question ``core.attention.patching_question`` asks (the two runs, the step t*
and the metric m = logit_a - logit_b there); its normalised effect is
(m_patched - m_corrupt) / (m_clean - m_corrupt): 0 is the corrupted run, 1 the clean run.
That is denoising (Heimersheim & Nanda 2024): it finds what is *sufficient* to bring the
clean answer back. Noising writes the corrupted run's activation into the clean run and
finds what is *necessary*: its effect (m_clean - m_patched) / (m_clean - m_corrupt) is 0 when
the clean run is unchanged, 1 when that component alone gives the corrupted run's metric.

Components (``SELECTIONS``, what the page's picker and ``--sites`` choose; by default heads
and the stream): every head of the three kinds (its output before W_o, the ``z`` hook site, at
every position: "heads"); each head's output at one position ("heads_positions"); each
head's q, k, v and pattern at every position ("head_parts": q, k and v at their sites; the
pattern by writing z = pattern_donor @ v of the receiving run, which is what the head's
output is made of, so no family needs a writable pattern; k and v of a grouped-query model
belong to a key/value head that a group of query heads shares: patching head h's k patches
its group's, and every head of the group shows that effect); each layer's MLP output at each
position ("mlp_positions", the ``mlp_out`` sites); and every layer's output (the residual
stream after the layer, the ``encoder.{i}.out`` / ``decoder.{i}.out`` sites) at each
position, encoder and decoder ("stream_positions"). A position is one of the site's tokens:
the source's (encoder) or the decoder inputs' (decoder), and for the heads and MLPs of a
one-stack model (decoder-only, masked) one of its whole sequence, template included
(``Patching.sequence``). A masked language model's question is read at its sentences' first
mask (``patching_question.mask_question``) and its one stream is the sentence's (its decoder
inputs are positions of it). The components are counted before any pass: more than
MAX_COMPONENTS are refused in one line.
Patching the encoder's output (``encoder.out``) at every position gives the decoder everything
it reads of the clean source, with the same prefix: an effect of 1. Every family is patched
through the same hook sites (``core.model.hooks``), in the calling thread only: a model shared
by every session is never changed for another.

Shape key: B rows (one component each), S source pieces, T decoder inputs (t* + 1), D model
width, H heads, Dh = D / H, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from core.attention.kinds import KINDS
from core.attention.patch_sites import (
    HEAD_ACTIVATIONS,
    MLPS,
    STREAMS,
    Component,
    head_site,
    read_sites,
    site,
)
from core.attention.patching_question import (
    Question,
    at_mask,
    check_pass,
    checked_sources,
    found_question,
    gap_caveat,
    given_question,
    last_logits,
    mask_question,
)
from core.measure.progress import check_time
from core.model.hooks import capture
from core.model.interface import TranslationModel, prompt_positions
from core.model.parts import MAX_LEN, TranslationError
from core.model.record import whole_sequence
from core.runs import budget

DIRECTIONS = ("denoise", "noise")  # clean into corrupted (sufficient), corrupted into clean
DIRECTION_NAMES = {
    "denoise": "denoising: clean into corrupted (what suffices)",
    "noise": "noising: corrupted into clean (what is necessary)",
}
INDIRECT_OBJECT = {  # Wang et al. (2023)'s indirect-object task as a prompted pair: the
    # template holds the sentence's one changed word (the repeated subject), the answer is
    # the indirect object (Mary), the corrupted run's the subject (John); GPT-2 reads each
    # name as one token
    "prompt": "When John and Mary went to the shops, {src} gave the bag to",
    "clean": "John",
    "corrupt": "Mary",
    "answer": "Mary",
    "wrong": "John",
}
SELECTIONS = {  # what to patch (the page's picker, --sites): its name in words
    "heads": "heads (each head's output, every position)",
    "heads_positions": "heads × position (each head's output at one position)",
    "head_parts": "q, k, v and pattern of each head",
    "mlp_positions": "MLP × position (each MLP's output at one position)",
    "stream_positions": "stream × position (each layer's output at one position)",
}
DEFAULT_SELECTION = ("heads", "stream_positions")  # what patching patches unless told
PICKS = {  # the page's picker: one choice, the selections it patches, and its words
    "heads_stream": (DEFAULT_SELECTION, "heads and stream × position"),
    **{name: ((name,), words.split(" (")[0]) for name, words in SELECTIONS.items()},
}
MAX_COMPONENTS = 20_000  # the most components one patching run takes (each costs a row of a
# batched pass: past this, a run on a shared server takes minutes)
ROWS = 256  # the most components patched in one batched pass (fewer where they pass the
# server's bytes for one pass: budget.patch_rows)


@dataclass
class Patching:
    """The effect of patching each component from the clean run into the corrupted one."""

    clean: list[str]  # S clean source pieces (<eos> included)
    corrupt: list[str]  # S corrupted source pieces
    prefix: list[str]  # T decoder inputs: <bos> + the common prefix of the translations (a
    # masked LM's: its first mask)
    answer: str  # the clean run's token at step t*
    wrong: str  # the corrupted run's token at step t*
    clean_metric: float  # logit(answer) - logit(wrong) in the clean run
    corrupt_metric: float  # the same in the corrupted run
    rows: list[dict] = field(default_factory=list)  # Component.row for every component
    direction: str = DIRECTIONS[0]  # "denoise" or "noise"
    chosen: bool = False  # the prefix and answers were given, not found by translating
    sequence: list[str] = field(default_factory=list)  # N tokens of a one-stack model's whole
    # sequence (its heads' and MLPs' positions), the clean run's; [] for two stacks

    def axes(self) -> dict[str, list[str]]:
        """The tokens along each kind's positions: the clean source (the encoder's), the
        decoder inputs (the decoder's), or a one-stack model's whole sequence (its heads' and
        MLPs')."""
        sides = {k: self.clean for k in ("encoder", "encoder_mlp", "encoder_stream")}
        axes = {k: sides.get(k, self.prefix) for k in (*KINDS, *MLPS, *STREAMS)}
        if self.sequence:
            axes |= {k: self.sequence for k in (*KINDS, *MLPS)}
        return axes

    @property
    def gap(self) -> float:
        """m_clean - m_corrupt: what every effect is divided by."""
        return self.clean_metric - self.corrupt_metric

    @property
    def caveat(self) -> str:
        """One line when the gap is too small to normalise by (and by how much); "" else."""
        return gap_caveat(self.clean_metric, self.corrupt_metric)

    def summary(self) -> dict:
        """The command's last line."""
        return {
            "clean_metric": self.clean_metric,
            "corrupt_metric": self.corrupt_metric,
            "gap": self.gap,
            "caveat": self.caveat,
            "step": len(self.prefix) - 1,
            "answer": self.answer,
            "wrong": self.wrong,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "prefix": self.prefix,
            "direction": self.direction,
            "chosen": self.chosen,
        }


def components(
    m: TranslationModel,
    source_len: int,
    target_len: int,
    selection: Sequence[str] = DEFAULT_SELECTION,
    sequence_len: int | None = None,
) -> list[Component]:
    """Every component of ``selection`` (of SELECTIONS), in its order: heads by kind, layer
    and head, then position or activation; MLPs and streams by layer, then position.
    ``sequence_len``: N of a one-stack model, whose heads' and MLPs' sites span its whole
    sequence."""
    if unknown := [s for s in selection if s not in SELECTIONS]:
        raise TranslationError(
            f"What to patch is one of {', '.join(SELECTIONS)}, not {', '.join(unknown)}."
        )

    def length(kind: str) -> int:
        if sequence_len is not None and kind not in STREAMS:
            return sequence_len
        return source_len if kind in ("encoder", "encoder_mlp", "encoder_stream") else target_len

    heads = [
        (kind, layer, head)
        for kind in m.head_kinds
        for layer in range(m.layers(kind))
        for head in range(m.cfg.num_heads)
    ]
    points = m.hook_points()  # a one-stack model's MLPs are its decoder's
    # a model whose tokens are all its encoder side's (``decoder_side`` refused: a masked LM's
    # decoder inputs are positions of its sentence) has one stream to patch, the sentence's
    streams = STREAMS[:1] if m.supports("decoder_side") else STREAMS
    mlps = [(k, s) for k, s in zip(MLPS, STREAMS) if site(Component(k, 0), m) in points]
    made = {
        "heads": lambda: [Component(*h) for h in heads],
        "heads_positions": lambda: [
            Component(*h, position=p) for h in heads for p in range(length(h[0]))
        ],
        "head_parts": lambda: [
            Component(*h, activation=a) for h in heads for a in HEAD_ACTIVATIONS[1:]
        ],
        "mlp_positions": lambda: [
            Component(mlp, layer, position=p)
            for mlp, stack in mlps
            for layer in range(m.layers(stack))
            for p in range(length(mlp))
        ],
        "stream_positions": lambda: [
            Component(stream, layer, position=p)
            for stream in streams
            for layer in range(m.layers(stream))
            for p in range(length(stream))
        ],
    }
    return [c for name in selection for c in made[name]()]


def _recorded(m: TranslationModel, sites: Sequence[str], src, tgt_in):
    """(logits (1, V) of the last step, {site: the run's activation there}); the weights
    (``pattern`` sites) of a pass that computes them (``captured``)."""
    seen: dict[str, torch.Tensor] = {}
    patterns = [s for s in sites if s.endswith(".pattern")]
    with m.hooks((s, capture(seen)) for s in sites if s not in patterns):
        logits = last_logits(m, src, tgt_in)
    if patterns:
        seen |= m.captured(src, tgt_in, patterns)
    return logits, seen


def _head_index(c: Component, x: torch.Tensor, heads: int) -> int:
    """The head of a (B, T, H', Dh) site a head's component writes: its own, or for k and v
    of a grouped-query model (H' key/value heads) the one its group of query heads shares."""
    return c.head // (heads // x.size(2))


def _patch_hook(rows: list[tuple[int, Component]], donor: torch.Tensor, heads: int = 0):
    """A hook writing each row's component from the donor run's activation (1, ...);
    ``heads``: the model's query heads (a grouped-query model's k and v have fewer)."""

    def hook(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()  # (B, T, H, Dh) a head's site, or (B, T, D) a stream's
        for row, c in rows:
            where = slice(None) if c.position is None else c.position
            if c.kind in KINDS:
                h = _head_index(c, x, heads or x.size(2))
                x[row, where, h] = donor[0, where, h]
            else:
                x[row, where] = donor[0, where]
        return x

    return hook


def _pattern_hook(rows: list[tuple[int, Component]], pattern, values: dict, v_site: str):
    """A hook on a head's ``z`` writing each row's head as the donor's weights ``pattern``
    (1, H, Tq, Tk) times the receiving run's own values (``values[v_site]``, (B, Tk, Hkv,
    Dh), read earlier in the same pass): the head with the donor's pattern."""

    def hook(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()  # (B, Tq, H, Dh)
        v = values[v_site]  # (B, Tk, Hkv, Dh)
        for row, c in rows:
            kv = c.head // (x.size(2) // v.size(2))
            x[row, :, c.head] = (pattern[0, c.head].to(v.dtype) @ v[row, :, kv]).to(x.dtype)
        return x

    return hook


def _writes(m: TranslationModel, chunk: Sequence[Component], clean: dict) -> list[tuple]:
    """The (site, hook) pairs patching each row's component of ``chunk`` from ``clean``."""
    by_site: dict[str, list[tuple[int, Component]]] = {}
    for row, c in enumerate(chunk):
        by_site.setdefault(site(c, m), []).append((row, c))
    hooks = []
    for s, rows in by_site.items():
        patterns = [(row, c) for row, c in rows if c.activation == "pattern" and c.kind in KINDS]
        if patterns:
            p = head_site(patterns[0][1].kind, patterns[0][1].layer, m)
            values: dict[str, torch.Tensor] = {}
            hooks.append((f"{p}.v", capture(values, detach=False)))
            hooks.append((s, _pattern_hook(patterns, clean[f"{p}.pattern"], values, f"{p}.v")))
        if others := [(row, c) for row, c in rows if (row, c) not in patterns]:
            hooks.append((s, _patch_hook(others, clean[s], m.cfg.num_heads)))
    return hooks


def patched_metrics(
    m: TranslationModel, chunk: Sequence[Component], clean: dict, src, tgt_in, answers
) -> torch.Tensor:
    """(B,) the metric of the receiving run with each row's component patched from ``clean``
    (the donor's activations at ``read_sites`` of each component)."""
    batch = len(chunk)
    with m.hooks(_writes(m, chunk, clean)):
        logits = last_logits(m, src.expand(batch, -1), tgt_in.expand(batch, -1))  # (B, V)
    return logits[:, answers[0]] - logits[:, answers[1]]  # (B,)


def _check_count(m, selection: Sequence[str], ids: list[int], tgt_in, chosen) -> tuple:
    """(the components to patch: ``chosen`` or those of ``selection``, the whole sequence's
    tokens or None); TranslationError in one line, before any patching pass, where they are
    more than MAX_COMPONENTS."""
    sequence = whole_sequence(m, ids, tgt_in)
    if chosen is not None:
        return list(chosen), sequence
    N = None if sequence is None else len(sequence)
    todo = components(m, len(ids), len(tgt_in), selection, N)
    if len(todo) > MAX_COMPONENTS:
        names = ", ".join(SELECTIONS[s].split(" (")[0] for s in selection)
        raise TranslationError(
            f"Patching {names} here is {len(todo):,} components, one batched row each; one "
            f"run takes at most {MAX_COMPONENTS:,}: choose fewer kinds, or a shorter sentence "
            "or prefix."
        )
    return todo, sequence


def result(q: Question, m: TranslationModel, metrics: tuple[float, float], rows, sequence=None):
    """The answer to ``q`` as ``patch`` gives it (a ``Patching``): ``metrics`` (clean,
    corrupted), ``rows``, a one-stack model's whole ``sequence`` of tokens."""
    words = m.target_tokens([*q.tgt_in[0].tolist(), *q.answers])
    step = q.tgt_in.size(1) - 1
    return Patching(
        *q.tokens,
        words[: step + 1],
        words[step + 1],
        words[step + 2],
        *metrics,
        list(rows),
        q.direction,
        q.given,
        sequence or [],
    )


def ask(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str | None = None,
    max_len: int = MAX_LEN,
    selection: Sequence[str] | None = None,
    chosen: Sequence[Component] | None = None,
) -> Question:
    """The question ``patch`` would ask of these sentences (TranslationError in one line,
    before any pass past the server's bytes); call it inside ``m.evaluating()``."""
    if direction not in DIRECTIONS:
        raise TranslationError(f"The direction is one of {', '.join(DIRECTIONS)}.")
    (a_ids, a_tokens), (b_ids, b_tokens) = checked_sources(m, clean, corrupt)
    prompt = prompt_positions(m)
    check_pass(m, len(a_ids), 1, prompt)  # before any pass: the shortest question
    if selection is not None:  # ... and, for ``patch``, the fewest components it can ask for
        _check_count(m, selection, a_ids, [m.start_id], chosen)
    src_a, src_b = (torch.tensor([i], device=m.device) for i in (a_ids, b_ids))  # (1, S)
    given = prefix is not None or answers is not None
    if at_mask(m):  # read at the first mask, in one pass: no prefix, no translation
        given = answers is not None
        tgt_in, ids = mask_question(m, (src_a, src_b), clean, prefix, answers)
    elif given:
        tgt_in, ids = given_question(m, (src_a, src_b), prefix, answers, target_lang, prompt)
    else:
        tgt_in, ids = found_question(m, (src_a, src_b), max_len, target_lang)
    check_pass(m, len(a_ids), tgt_in.size(1), prompt)  # the question's
    return Question(src_a, src_b, (a_tokens, b_tokens), tgt_in, ids, given, prompt, direction)


@torch.no_grad()
def patch(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    chosen: Sequence[Component] | None = None,
    max_len: int = MAX_LEN,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str | None = None,
    selection: Sequence[str] = DEFAULT_SELECTION,
) -> Patching:
    """Patch every component of ``selection`` (of SELECTIONS; or ``chosen``) from one run
    into the other: clean into corrupted (``denoise``) or corrupted into clean (``noise``).
    The metric is read after ``prefix`` between ``answers`` where given, else at the
    translations' first difference (``target_lang``: a multilingual model's output
    language, forced first)."""
    with m.evaluating():
        q = ask(
            m, clean, corrupt, direction, prefix, answers, target_lang, max_len, selection, chosen
        )
        donor, receiver = q.runs
        todo, sequence = _check_count(
            m, selection, q.clean[0].tolist(), q.tgt_in[0].tolist(), chosen
        )
        reads = [s for c in todo for s in read_sites(c, m)]
        logits_d, seen = _recorded(m, list(dict.fromkeys(reads)), donor, q.tgt_in)
        m_donor, m_receiver = (
            float(q.metric(logits_d)[0]),
            float(q.metric(last_logits(m, receiver, q.tgt_in))[0]),
        )
        m_clean, m_corrupt = (
            (m_donor, m_receiver) if direction == "denoise" else (m_receiver, m_donor)
        )
        effects: list[float] = []
        S, T = q.clean.size(1), q.tgt_in.size(1)
        rows = budget.patch_rows(vars(m.cfg), S, T, ROWS, q.prompt)
        for start in range(0, len(todo), rows):
            check_time()  # a shared server's limit for one heavy job
            chunk = todo[start : start + rows]
            metrics = patched_metrics(m, chunk, seen, receiver, q.tgt_in, q.answers)  # (B,)
            effects += q.effects(metrics, m_clean, m_corrupt)
    return result(q, m, (m_clean, m_corrupt), [c.row(e) for c, e in zip(todo, effects)], sequence)
