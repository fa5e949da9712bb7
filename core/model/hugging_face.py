"""Tokens and decoding of a Hugging Face encoder-decoder (Marian / opus-mt, BART, mBART, T5,
M2M100, NLLB), for its adapter ``core.model.hf_model.HFModel`` (the functions take it as
``hm``).

A model is a folder in ``save_pretrained`` layout (``config.json``, safetensors weights,
tokenizer files), or on the command line a hub id downloaded into Hugging Face's cache. It is
loaded with ``attn_implementation="eager"`` (only the eager path returns attention weights),
never with ``trust_remote_code``. Its ``Translation`` holds the maps of all three kinds, from
``generate`` (greedy or beam search) and one teacher-forced pass with ``output_attentions``.

Tokens are shown in the studio's convention (``core.corpus.bpe``): a piece that continues a
word carries the ``##`` prefix; SentencePiece's ``▁`` and byte-level BPE's ``Ġ`` word
starts are dropped; specials stay as the tokenizer writes them (``</s>``, ``<pad>``).

Shape key: S source tokens, T decoder steps, L layers, H heads, V vocabulary.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from core.corpus.bpe import LONE_START, PREFIX
from core.model.architectures import ARCHITECTURES
from core.model.hf_folder import HFModelError
from core.model.interface import TranslationModel
from core.model.parts import (
    LANGUAGE_CODE,
    TOP_K,
    AttentionMaps,
    DecodeSettings,
    Source,
    Translation,
    TranslationError,
    translation_of,
)

MULTILINGUAL = tuple(  # model types whose target language is forced (mBART, M2M100 / NLLB)
    name for name, row in ARCHITECTURES.items() if "multilingual" in row.quirks
)
WORD_STARTS = ("\u2581", "\u0120")  # SentencePiece's ▁ and byte-level BPE's Ġ


# ----------------------------------------------------------------------------- loading


def check_tokenizer(tokenizer, config) -> None:
    """HFModelError unless every id the tokenizer writes exists in the model."""
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if len(tokenizer) > vocab:
        raise HFModelError(
            f"The tokenizer has {len(tokenizer):,} tokens but the model only {vocab:,} "
            "embeddings: this tokenizer does not belong to this model."
        )
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None and value >= vocab:
            raise HFModelError(f"The tokenizer's {name} ({value}) is not an id of the model.")


def multilingual(config) -> bool:
    """Whether the target language is chosen by forcing its code as the first output."""
    return getattr(config, "model_type", "") in MULTILINGUAL


def language_codes(tokenizer) -> list[str]:
    """The language codes among the tokenizer's special tokens (M2M100 ``__fr__``, NLLB
    ``fra_Latn``), sorted."""
    tokens = set(getattr(tokenizer, "additional_special_tokens", None) or [])
    tokens |= set(getattr(tokenizer, "lang_code_to_id", {}) or {})
    tokens |= {t for t in tokenizer.get_vocab() if LANGUAGE_CODE.fullmatch(t)}
    return sorted(t for t in tokens if LANGUAGE_CODE.fullmatch(t))


ALGORITHMS = {  # a fast tokenizer's model class -> its name for people
    "BPE": "BPE",
    "Unigram": "SentencePiece unigram",
    "WordPiece": "WordPiece",
    "WordLevel": "word-level",
}


def tokenizer_algorithm(tokenizer) -> str:
    """How the tokenizer cuts text, for people: "BPE", "SentencePiece unigram", "WordPiece",
    "SentencePiece" (a slow tokenizer over a .spm model) or "subword"."""
    if getattr(tokenizer, "is_fast", False):
        model = type(tokenizer.backend_tokenizer.model).__name__
        return ALGORITHMS.get(model, "subword")
    if getattr(tokenizer, "vocab_files_names", {}).get("source_spm") or hasattr(
        tokenizer, "sp_model"
    ):
        return "SentencePiece"
    return "subword"


def tokenizer_kind(tokenizer) -> str:
    """How the tokenizer marks words: "metaspace" (▁), "byte-level" (Ġ) or "pieces"."""
    sample = [t for t in list(tokenizer.get_vocab())[:5000] if t not in _specials(tokenizer)]
    for mark, kind in zip(WORD_STARTS, ("metaspace", "byte-level")):
        if any(t.startswith(mark) for t in sample):
            return kind
    return "pieces"


def _specials(tokenizer) -> set[str]:
    """The tokenizer's special tokens."""
    return set(getattr(tokenizer, "all_special_tokens", []) or [])


# ----------------------------------------------------------------------------- tokens


def shown_tokens(hm: TranslationModel, ids: Sequence[int], first: bool = True) -> list[str]:
    """Tokens in the studio's convention: continuing pieces carry ``##``, word-start marks
    dropped, specials as the tokenizer writes them. ``first``: the first piece starts the
    text (no ``##`` even without a mark); False for tokens that follow others, such as one
    step's candidates."""
    raw = hm.tokenizer.convert_ids_to_tokens(list(ids))
    specials, kind = _specials(hm.tokenizer), hm.meta.get("tokens", "pieces")
    shown = []
    for i, tok in zip(ids, raw):
        if tok is None:  # an id past the tokenizer's (Qwen2 pads its embeddings: 151,936)
            shown.append(f"<unused {i}>")
            continue
        if tok in specials or LANGUAGE_CODE.fullmatch(tok):
            shown.append(tok)
            continue
        if kind == "pieces":
            shown.append(tok)
        elif tok.startswith(WORD_STARTS):
            shown.append(tok[1:] or LONE_START)
        else:
            shown.append(tok if first else PREFIX + tok)
        first = False
    return shown


def words_of(hm: TranslationModel, ids: Sequence[int]) -> list[str]:
    """The decoded text of ``ids`` (specials skipped), as words."""
    return hm.tokenizer.decode(list(ids), skip_special_tokens=True).split()


# ----------------------------------------------------------------------------- decoding


def encode_source(hm: TranslationModel, sentence: str) -> torch.Tensor:
    """(1, S) the ids the encoder reads (the tokenizer's specials included)."""
    if not (sentence or "").strip():
        raise TranslationError("The sentence is empty: type a few words to translate.")
    limit = hm.cfg.max_positions
    ids = hm.tokenizer(sentence, truncation=True, max_length=limit)["input_ids"]
    return torch.tensor([ids], device=_device(hm))


def _device(hm: TranslationModel) -> torch.device:
    return next(hm.model.parameters()).device


def forced_bos(hm: TranslationModel, target_lang: str | None) -> int | None:
    """The id forced as the first output for ``target_lang`` (multilingual models)."""
    if not target_lang:
        return None
    if target_lang not in hm.meta.get("language_codes", []):
        raise TranslationError(
            f"{target_lang} is not a language code of this model; use one of: "
            + ", ".join(hm.meta.get("language_codes", [])[:20])
        )
    return hm.tokenizer.convert_tokens_to_ids(target_lang)


def generate_kwargs(
    hm: TranslationModel, settings: DecodeSettings, target_lang: str | None
) -> dict:
    """The arguments of ``generate`` for these decoding settings (no sampling)."""
    kwargs = {
        "num_beams": max(1, settings.beam_size),
        "do_sample": False,
        "max_new_tokens": max(1, min(settings.max_len, hm.cfg.max_positions - 1)),
        "num_return_sequences": 1,
    }
    if settings.beam_size > 1:
        kwargs["length_penalty"] = settings.alpha
    if (bos := forced_bos(hm, target_lang)) is not None:
        kwargs["forced_bos_token_id"] = bos
    return kwargs


@torch.no_grad()
def generate(hm: TranslationModel, src: torch.Tensor, settings: DecodeSettings, target_lang=None):
    """(1, T + 1) the sequence ``generate`` returns: the decoder's start token, then the
    output (with </s> when reached)."""
    out = hm.model.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        **generate_kwargs(hm, settings, target_lang),
    )
    seq = out[0].tolist()
    eos = hm.model.config.eos_token_id
    if eos in seq[1:]:
        seq = seq[: seq.index(eos, 1) + 1]
    return torch.tensor([seq], device=src.device)


@torch.no_grad()
def forced_pass(hm: TranslationModel, src: torch.Tensor, decoder_inputs: torch.Tensor):
    """One teacher-forced pass with ``output_attentions``: (log-probabilities (1, T, V),
    AttentionMaps with (L, 1, H, Tq, Tk) per kind)."""
    out = hm.model(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        decoder_input_ids=decoder_inputs,
        output_attentions=True,
        use_cache=False,  # one pass: no cache to build (a quarter of a tiny model's pass)
        return_dict=True,
    )
    maps = AttentionMaps(
        torch.stack(out.encoder_attentions),  # (L, 1, H, S, S)
        torch.stack(out.decoder_attentions),  # (L, 1, H, T, T)
        torch.stack(out.cross_attentions),  # (L, 1, H, T, S)
    )
    return out.logits.float().log_softmax(-1), maps


def _rows(steps, T: int, width: int | None) -> torch.Tensor:
    """Per-step attentions of ``generate`` (T tuples of L (1, H, 1, k_t)) -> (L, 1, H, T, K),
    each step's row zero-padded on the keys (K = ``width``, or T for self-attention)."""
    rows = [torch.stack(step)[:, :, :, -1] for step in steps[:T]]  # T x (L, 1, H, k_t)
    K = width if width is not None else T
    out = rows[0].new_zeros(*rows[0].shape[:3], T, K)  # (L, 1, H, T, K)
    for t, row in enumerate(rows):
        out[..., t, : row.size(-1)] = row
    return out


@torch.no_grad()
def generate_with_maps(hm: TranslationModel, src, settings: DecodeSettings, target_lang=None):
    """Greedy ``generate`` keeping what it computed on the way: (output ids up to and
    including </s>, log-probabilities (1, T, V), AttentionMaps (L, 1, H, ., .)): the maps and
    logits of that output with no second pass (equal to a teacher-forced one, tested)."""
    out = hm.model.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        output_attentions=True,
        output_logits=True,
        return_dict_in_generate=True,
        **generate_kwargs(hm, settings, target_lang),
    )
    seq, eos = out.sequences[0].tolist()[1:], hm.model.config.eos_token_id
    seq = seq[: seq.index(eos) + 1] if eos in seq else seq
    T = len(seq)
    logp = torch.stack(out.logits[:T], dim=1).float().log_softmax(-1)  # (1, T, V)
    maps = AttentionMaps(
        torch.stack(out.encoder_attentions),  # (L, 1, H, S, S)
        _rows(out.decoder_attentions, T, None),  # (L, 1, H, T, T)
        _rows(out.cross_attentions, T, src.size(1)),  # (L, 1, H, T, S)
    )
    return seq, logp, maps


def translate(
    hm: TranslationModel, sentence: str, settings: DecodeSettings, target_lang: str | None = None
) -> Translation:
    """Translate with ``generate``: greedy keeps the maps and logits ``generate`` computed;
    beam search reads every map of its output in one teacher-forced pass."""
    src = encode_source(hm, sentence)  # (1, S)
    if settings.beam_size <= 1:
        out_ids, logp, maps = generate_with_maps(hm, src, settings, target_lang)
        passed = (logp, maps)
    else:
        out_ids, passed = generate(hm, src, settings, target_lang)[0, 1:].tolist(), None
    notes = []
    if not out_ids or out_ids[-1] != hm.model.config.eos_token_id:
        notes.append(f"Stopped at the maximum output length ({len(out_ids)}) before </s>.")
    return _translation(hm, src, out_ids, settings.topk, notes, passed=passed)


def forced_translation(
    hm: TranslationModel,
    sentence: str,
    target: str,
    topk: int = TOP_K,
    target_lang: str | None = None,
) -> Translation:
    """The target a user gave (read by the model's tokenizer), teacher-forced after the
    sentence, with every map and each target token's probability and rank."""
    if not (target or "").strip():
        raise TranslationError("The target is empty: type the translation to explain.")
    src = encode_source(hm, sentence)  # (1, S)
    out_ids = target_ids(hm, target, target_lang)
    notes = []
    if missing := unknown_target_words(hm, target):
        notes.append(
            "Read (partly) as the unknown token by the model's tokenizer: "
            + ", ".join(dict.fromkeys(missing))
            + "."
        )
    return _translation(hm, src, out_ids, topk, notes, forced=True)


def _translation(
    hm: TranslationModel, src, out_ids: list[int], topk: int, notes: list, forced=False, passed=None
):
    """The Translation of ``out_ids`` after the (1, S) source: ``passed`` (log-probabilities
    and maps ``generate`` kept), else those of one teacher-forced pass."""
    _, dec = forced_inputs(hm, src[0].tolist(), out_ids)  # (1, T)
    logp, maps = passed if passed is not None else forced_pass(hm, src, dec)
    src_ids = src[0].tolist()
    unknown = [i == hm.tokenizer.unk_token_id for i in src_ids]
    if any(unknown):
        notes.append("Some words are not in the model's vocabulary (read as unknown).")
    outputs = shown_tokens(hm, out_ids)
    return translation_of(
        source=Source(ids=src_ids, tokens=shown_tokens(hm, src_ids), unknown=unknown, notes=[]),
        out_ids=out_ids,
        logp=logp[0],
        maps=AttentionMaps(
            *(m[:, 0].float().cpu() for m in (maps.encoder, maps.decoder_self, maps.cross))
        ),
        outputs=outputs,
        ended=bool(out_ids) and out_ids[-1] == hm.model.config.eos_token_id,
        decoder_inputs=shown_tokens(hm, dec[0].tolist()),
        words=words_of(hm, out_ids),
        candidates=candidates(hm),
        topk=topk,
        notes=notes,
        forced=forced,
    )


def candidates(hm: TranslationModel) -> Callable[[list[int]], list[str]]:
    """Ids -> tokens as one step's candidates are shown: as the output tokens are (no
    ``▁``/``Ġ``; a continuing piece with ``##``), each read as following other tokens."""
    return functools.partial(shown_tokens, hm, first=False)


def forced_inputs(hm: TranslationModel, src_ids, out_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """((1, S) source, (1, T) decoder inputs: the start token + out_ids[:-1])."""
    device = _device(hm)
    start = hm.model.config.decoder_start_token_id
    return (
        torch.tensor([list(src_ids)], device=device),
        torch.tensor([[start, *list(out_ids)[:-1]]], device=device),
    )


# ----------------------------------------------------------------------------- forcing


def target_ids(hm: TranslationModel, text: str, target_lang: str | None = None) -> list[int]:
    """A target sentence as the decoder's output ids (with </s>; a multilingual model's
    language code first), cut to the model's positions."""
    ids = hm.tokenizer(text_target=text)["input_ids"]
    if (bos := forced_bos(hm, target_lang)) is not None:
        ids = [bos, *ids]
    return ids[: hm.cfg.max_positions - 1]


def unknown_target_words(hm: TranslationModel, text: str) -> list[str]:
    """Words of ``text`` that the tokenizer reads (partly) as its unknown token."""
    unk = hm.tokenizer.unk_token_id
    if unk is None:
        return []
    return [w for w in text.split() if unk in hm.tokenizer(text_target=w)["input_ids"]]
