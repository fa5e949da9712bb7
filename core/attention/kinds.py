"""The three attention kinds: their names, the words for their axes, and token checks.

Kinds: ``"encoder"`` (source attends to source), ``"decoder_self"`` (output attends to
earlier output, causal) and ``"cross"`` (output attends to source).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.model.record import WHOLE

KINDS = ("encoder", "decoder_self", "cross")

BOUNDARY_TOKENS = (  # the studio's <bos>/<eos>; a Hugging Face model's <s>, </s> and the
    *("<bos>", "<eos>", "<s>", "</s>", "<pad>"),  # <pad> Marian and T5 start decoding from;
    "⏎",  # the new line that ends a prompted language model's sentence (core.model.prompted)
    *("[CLS]", "[SEP]"),  # a BERT-style masked language model's (BERT, DistilBERT, ELECTRA)
)

KIND_NAMES = {  # short names, for pickers, legends and head labels ("Cross L1 H2")
    "encoder": "Encoder self",
    "decoder_self": "Decoder self",
    "cross": "Cross",
}


KIND_LABELS: dict[str, tuple[str, str, str]] = {
    "encoder": (
        "Encoder self-attention (source → source)",
        "source token (query)",
        "source token (key)",
    ),
    "decoder_self": (
        "Decoder self-attention (output → earlier output, causal)",
        "output token (query)",
        "earlier output token (key)",
    ),
    "cross": (
        "Cross attention (decoder → encoder)",
        "output token (query)",
        "source token (key)",
    ),
    WHOLE: (  # not a kind: a one-stack model's one attention (a prompt and its output, or a
        # sentence), over its whole sequence, for its axes' words
        "Self-attention over the whole sequence",
        "token (query)",
        "token (key)",
    ),
}


def kind_labels(kind: str) -> tuple[str, str, str]:
    """Return (title, query words, key words) for a kind, or raise a helpful error."""
    if kind not in KIND_LABELS:
        raise ValueError(f"Unknown attention kind {kind!r}; use one of {list(KIND_LABELS)}.")
    return KIND_LABELS[kind]


def short_title(kind: str) -> str:
    """The kind's title without its arrows: "Cross attention", "Encoder self-attention"."""
    return kind_labels(kind)[0].split(" (")[0]


def reading_hint(kind: str) -> str:
    """Return a sentence saying how to read a map: each row's query attends to the keys."""
    _, query_words, key_words = kind_labels(kind)
    return f"each row: {query_words} attends to columns: {key_words}"


def check_tokens(shape: tuple[int, ...], query_tokens: Sequence, key_tokens: Sequence) -> None:
    """Raise ValueError when token lists do not match the last two dimensions."""
    tq, tk = shape[-2], shape[-1]
    if len(query_tokens) != tq or len(key_tokens) != tk:
        raise ValueError(
            f"Attention has {tq} queries x {tk} keys but got {len(query_tokens)} query "
            f"tokens and {len(key_tokens)} key tokens; pass the tokens the map was made from."
        )
