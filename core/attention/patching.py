"""Activation patching (Meng et al. 2022; Wang et al. 2023): which heads, and which positions
of the residual stream, carry what differs between two source sentences.

Two sources of the same length in pieces that differ in a word ("the boy is tall ." / "the
girl is tall ."): the clean and the corrupted run. Both are translated greedily; at the first
step t* where the translations differ, the decoder fed their common prefix, the metric is the
logit difference between the clean run's answer a and the corrupted run's b:
m = logit_a - logit_b at step t*. One component's activation of the clean run is written into
the corrupted run, one component per batch row, and its normalised effect is
(m_patched - m_corrupt) / (m_clean - m_corrupt): 0 is the corrupted run, 1 the clean run.
That is denoising (Heimersheim & Nanda 2024): it finds what is *sufficient* to bring the
clean answer back. Noising writes the corrupted run's activation into the clean run and
finds what is *necessary*: its effect (m_clean - m_patched) / (m_clean - m_corrupt) is 0 when
the clean run is unchanged, 1 when that component alone gives the corrupted run's metric.

Where the translations agree, or to ask about another step, the user gives the decoder's
prefix (target words, possibly none) and the two answer words; given a prefix alone, the
answers are each run's most likely word after it.

Components: every head of the three kinds (its output, the head's slice at W_o's input, at
every position), and every layer's output (the residual stream after the layer) at each
position, encoder and decoder. Patching the encoder's output at every position gives the
decoder everything it reads of the clean source, with the same prefix: an effect of 1.

Shape key: B rows (one component each), S source pieces, T decoder inputs (t* + 1), D model
width, H heads, Dh = D / H, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from core.attention.ablation import attention_modules
from core.attention.kinds import KINDS
from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model.checked_translation import MAX_SENTENCE_TOKENS
from core.model.checkpoints import LoadedModel
from core.model.decode import MAX_LEN, TranslationError, greedy_decode, prepare_source
from core.model.transformer import Transformer, evaluating

DIRECTIONS = ("denoise", "noise")  # clean into corrupted (sufficient), corrupted into clean
DIRECTION_NAMES = {
    "denoise": "denoising: clean into corrupted (what suffices)",
    "noise": "noising: corrupted into clean (what is necessary)",
}
STREAMS = ("encoder_stream", "decoder_stream")  # a layer's output, position by position
ENCODER_OUTPUT = "encoder_output"  # the encoder's final output (what the decoder reads)
ROWS = 256  # components patched in one batched pass


@dataclass(frozen=True)
class Component:
    """One activation to patch: a head (kind in KINDS) or a layer's output (kind in STREAMS,
    or ENCODER_OUTPUT with layer 0), at one position or (None) at every position."""

    kind: str
    layer: int
    head: int | None = None
    position: int | None = None

    def row(self, effect: float) -> dict:
        """The command's line: kind, layer, head or position, effect."""
        where = {"head": self.head} if self.kind in KINDS else {"position": self.position}
        return {"kind": self.kind, "layer": self.layer, **where, "effect": effect}


@dataclass
class Patching:
    """The effect of patching each component from the clean run into the corrupted one."""

    clean: list[str]  # S clean source pieces (<eos> included)
    corrupt: list[str]  # S corrupted source pieces
    prefix: list[str]  # T decoder inputs: <bos> + the common prefix of the translations
    answer: str  # the clean run's token at step t*
    wrong: str  # the corrupted run's token at step t*
    clean_metric: float  # logit(answer) - logit(wrong) in the clean run
    corrupt_metric: float  # the same in the corrupted run
    rows: list[dict] = field(default_factory=list)  # Component.row for every component
    direction: str = DIRECTIONS[0]  # "denoise" or "noise"
    chosen: bool = False  # the prefix and answers were given, not found by translating

    def summary(self) -> dict:
        """The command's last line."""
        return {
            "clean_metric": self.clean_metric,
            "corrupt_metric": self.corrupt_metric,
            "step": len(self.prefix) - 1,
            "answer": self.answer,
            "wrong": self.wrong,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "prefix": self.prefix,
            "direction": self.direction,
            "chosen": self.chosen,
        }


def components(model: Transformer, source_len: int, target_len: int) -> list[Component]:
    """Every head of every kind, then each layer's output at each position."""
    cfg = model.cfg
    layers = {"encoder": cfg.num_encoder_layers, "decoder": cfg.num_decoder_layers}
    heads = [
        Component(kind, layer, head)
        for kind in KINDS
        for layer in range(layers["encoder" if kind == "encoder" else "decoder"])
        for head in range(cfg.num_heads)
    ]
    streams = [
        Component(stream, layer, position=p)
        for stream, n, length in (
            ("encoder_stream", layers["encoder"], source_len),
            ("decoder_stream", layers["decoder"], target_len),
        )
        for layer in range(n)
        for p in range(length)
    ]
    return heads + streams


def _stream_module(model: Transformer, c: Component) -> torch.nn.Module:
    """The module whose output (first element) a stream component patches."""
    if c.kind == ENCODER_OUTPUT:
        return model.encoder
    stack = model.encoder if c.kind == "encoder_stream" else model.decoder
    return stack.layers[c.layer]


def _site(model: Transformer, c: Component) -> torch.nn.Module:
    """Where a component lives: W_o of a head's attention, else the module it is the output of."""
    if c.kind in KINDS:
        return attention_modules(model, c.kind)[c.layer].W_o
    return _stream_module(model, c)


@contextmanager
def _hooked(sites: dict[torch.nn.Module, object], pre: set):
    """Hooks on these modules (forward pre-hooks on those in ``pre``); removed after."""
    handles = [
        m.register_forward_pre_hook(fn) if m in pre else m.register_forward_hook(fn)
        for m, fn in sites.items()
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _recorded(model: Transformer, sites: Sequence[torch.nn.Module], src, tgt_in):
    """(logits (1, T, V), {module: its clean activation}): W_o's input (1, T, D) or the
    module's first output (1, S|T, D)."""
    seen: dict[torch.nn.Module, torch.Tensor] = {}
    pre = {m for m in sites if isinstance(m, torch.nn.Linear)}

    def keep(module):
        if module in pre:
            return lambda m, args: seen.__setitem__(m, args[0].detach()) or None
        return lambda m, args, out: seen.__setitem__(m, out[0].detach()) or None

    with _hooked({m: keep(m) for m in sites}, pre):
        logits, *_ = model(src, tgt_in)  # (1, T, V)
    return logits, seen


def _patcher(model: Transformer, chunk: Sequence[Component], clean: dict):
    """({module: hook}, pre-hook modules) writing each row's component from ``clean``."""
    by_site: dict[torch.nn.Module, list[tuple[int, Component]]] = {}
    for row, c in enumerate(chunk):
        by_site.setdefault(_site(model, c), []).append((row, c))
    width = model.cfg.d_model // model.cfg.num_heads  # Dh

    def head_hook(rows):
        def hook(module, args):
            x = args[0].clone()  # (B, T, D): the heads' outputs, concatenated
            for row, c in rows:
                cut = slice(c.head * width, (c.head + 1) * width)
                x[row, :, cut] = clean[module][0, :, cut]
            return (x, *args[1:])

        return hook

    def stream_hook(rows):
        def hook(module, args, out):
            x = out[0].clone()  # (B, S|T, D)
            for row, c in rows:
                where = slice(None) if c.position is None else c.position
                x[row, where] = clean[module][0, where]
            return (x, *out[1:])

        return hook

    pre = {m for m, rows in by_site.items() if rows[0][1].kind in KINDS}
    hooks = {m: (head_hook if m in pre else stream_hook)(rows) for m, rows in by_site.items()}
    return hooks, pre


def patched_metrics(
    model: Transformer, chunk: Sequence[Component], clean: dict, src, tgt_in, answers
) -> torch.Tensor:
    """(B,) the metric of the corrupted run with each row's component patched from ``clean``."""
    hooks, pre = _patcher(model, chunk, clean)
    batch = len(chunk)
    with _hooked(hooks, pre):
        logits, *_ = model(src.expand(batch, -1), tgt_in.expand(batch, -1))  # (B, T, V)
    return logits[:, -1, answers[0]] - logits[:, -1, answers[1]]  # (B,)


def _greedy(model: Transformer, ids: list[int], max_len: int) -> list[int]:
    """A source's greedy translation ids, up to and including <eos>."""
    src = torch.tensor([ids], device=next(model.parameters()).device)  # (1, S)
    out, _, _ = greedy_decode(model, src, max_len, scores=False)  # (1, T)
    row = out[0].tolist()
    return row[: row.index(Vocab.eos_id) + 1] if Vocab.eos_id in row else row


def _sources(lm: LoadedModel, clean: str, corrupt: str):
    """The two sources as (ids, tokens) each; TranslationError unless of one length."""
    for text in (clean, corrupt):
        if len(tokenize(text or "")) > MAX_SENTENCE_TOKENS:
            raise TranslationError(
                f"Activation patching takes sentences of at most {MAX_SENTENCE_TOKENS} tokens."
            )
    limit = lm.model.cfg.max_positions
    (a, ta, _, _), (b, tb, _, _) = (
        prepare_source(text, lm.src_vocab, limit) for text in (clean, corrupt)
    )
    if len(a) != len(b):
        raise TranslationError(
            f"The two sentences must have the same length in pieces: the clean one has "
            f"{len(a)} ({' '.join(ta)}), the corrupted one {len(b)} ({' '.join(tb)})."
        )
    if a == b:
        raise TranslationError("The two sentences are the same: change a word in one.")
    return (a, ta), (b, tb)


def _one_piece(lm: LoadedModel, word: str) -> int:
    """The target vocabulary's id of an answer word; TranslationError unless one known piece."""
    words = tokenize(word or "")
    pieces, ids = lm.tgt_vocab.segment(words)
    if not ids:
        how = "empty"
    elif len(ids) > 1:
        how = f"{len(ids)} pieces ({' '.join(pieces)})"
    elif lm.tgt_vocab.unknown(words):
        how = "not in the model's target vocabulary"
    else:
        return ids[0]
    raise TranslationError(f"An answer must be one word the model knows: “{word}” is {how}.")


def _found_question(model, a_ids: list[int], b_ids: list[int], device, max_len: int):
    """(decoder inputs (1, T): <bos> + the translations' common prefix, (answer, wrong) ids):
    the first step where the two greedy translations differ."""
    out_a, out_b = _greedy(model, a_ids, max_len), _greedy(model, b_ids, max_len)
    step = next((t for t, (x, y) in enumerate(zip(out_a, out_b)) if x != y), None)
    if step is None:
        raise TranslationError(
            "Both sentences are translated the same way, so there is no answer to "
            "compare: change a word the translation depends on, or give a target prefix "
            "and two answer words."
        )
    tgt_in = torch.tensor([[Vocab.bos_id, *out_a[:step]]], device=device)  # (1, T)
    return tgt_in, (out_a[step], out_b[step])


def _given_question(model, lm: LoadedModel, sources, prefix: str | None, answers):
    """(decoder inputs (1, T): <bos> + the prefix given, (answer, wrong) ids): the answers
    given, else each source's likeliest word after the prefix."""
    words = tokenize(prefix or "")
    if len(words) > MAX_SENTENCE_TOKENS:
        raise TranslationError(f"The prefix takes at most {MAX_SENTENCE_TOKENS} words.")
    if missing := lm.tgt_vocab.unknown(words):
        raise TranslationError(
            f"The prefix has words the model does not know: {', '.join(missing)}."
        )
    device = sources[0].device
    tgt_in = torch.tensor([[Vocab.bos_id, *lm.tgt_vocab.segment(words)[1]]], device=device)
    if answers is not None:
        pair = tuple(_one_piece(lm, w) for w in answers)
    else:
        pair = tuple(int(model(s, tgt_in)[0][0, -1].argmax()) for s in sources)
    if pair[0] == pair[1]:
        said = lm.tgt_vocab.decode([pair[0]])[0]
        raise TranslationError(f"Both runs answer “{said}” there: give two different answer words.")
    return tgt_in, pair


def _metric(logits: torch.Tensor, answers) -> float:
    """logit(answer) - logit(wrong) at the last step of (1, T, V) logits."""
    return float(logits[0, -1, answers[0]] - logits[0, -1, answers[1]])


@torch.no_grad()
def patch(
    lm: LoadedModel,
    clean: str,
    corrupt: str,
    chosen: Sequence[Component] | None = None,
    max_len: int = MAX_LEN,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
) -> Patching:
    """Patch every component (or ``chosen``) from one run into the other: clean into
    corrupted (``denoise``) or corrupted into clean (``noise``). The metric is read after
    ``prefix`` between ``answers`` where given, else at the translations' first difference.

    Hooks are set on ``lm.model`` while this runs: it must not be shared with other threads
    meanwhile (see core.attention.ablation.private_copy)."""
    if direction not in DIRECTIONS:
        raise TranslationError(f"The direction is one of {', '.join(DIRECTIONS)}.")
    model = lm.model
    (a_ids, a_tokens), (b_ids, b_tokens) = _sources(lm, clean, corrupt)
    with evaluating(model):
        device = next(model.parameters()).device
        src_a, src_b = (torch.tensor([i], device=device) for i in (a_ids, b_ids))  # (1, S)
        given = prefix is not None or answers is not None
        tgt_in, answers_ids = (
            _given_question(model, lm, (src_a, src_b), prefix, answers)
            if given
            else _found_question(model, a_ids, b_ids, device, max_len)
        )
        todo = list(chosen) if chosen is not None else components(model, len(a_ids), tgt_in.size(1))
        sites = list(dict.fromkeys(_site(model, c) for c in todo))
        donor, receiver = (src_a, src_b) if direction == "denoise" else (src_b, src_a)
        logits_d, seen = _recorded(model, sites, donor, tgt_in)
        logits_r, *_ = model(receiver, tgt_in)  # (1, T, V)
        m_donor, m_receiver = _metric(logits_d, answers_ids), _metric(logits_r, answers_ids)
        m_clean, m_corrupt = (
            (m_donor, m_receiver) if direction == "denoise" else (m_receiver, m_donor)
        )
        span = m_clean - m_corrupt
        effects: list[float] = []
        for start in range(0, len(todo), ROWS):
            chunk = todo[start : start + ROWS]
            metrics = patched_metrics(model, chunk, seen, receiver, tgt_in, answers_ids)  # (B,)
            moved = metrics - m_corrupt if direction == "denoise" else m_clean - metrics
            effects += (moved / span).tolist()
    words = lm.tgt_vocab.decode([*tgt_in[0].tolist(), *answers_ids])
    step = tgt_in.size(1) - 1
    return Patching(
        a_tokens,
        b_tokens,
        words[: step + 1],
        words[step + 1],
        words[step + 2],
        m_clean,
        m_corrupt,
        [c.row(e) for c, e in zip(todo, effects)],
        direction,
        given,
    )
