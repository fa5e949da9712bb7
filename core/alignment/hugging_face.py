"""Word alignment read from a Hugging Face encoder-decoder's cross-attention.

Each gold word is cut into the model's own pieces by its tokenizer (a word at a time, with the
leading space a byte-level BPE expects), so every piece knows its word; the specials the
tokenizer puts around a sentence (BART's ``<s>``, M2M100's source language code, the target
language a multilingual model is forced to) are fed as the model expects and their rows and
columns left out of the reading, as ``core.alignment.extract`` leaves out ``<bos>``. What it
returns becomes the studio's ``PairMaps`` there: every reader, AER and link extraction run
unchanged.

Shape key: L layers, H heads, T target pieces + 1, S source pieces + the closing special.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.model import hugging_face as hf


def word_pieces(hm: hf.HFModel, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
    """(piece ids, the word index of each piece) of pre-tokenized words."""
    ids, owner = [], []
    spaced = hm.meta.get("tokens") == "byte-level"
    for i, word in enumerate(words):
        text = f" {word}" if spaced and i else word
        encoded = (
            hm.tokenizer(text_target=text, add_special_tokens=False)
            if target
            else hm.tokenizer(text, add_special_tokens=False)
        )["input_ids"]
        ids += encoded
        owner += [i] * len(encoded)
    return ids, owner


def framed(hm: hf.HFModel, words: Sequence[str], target: bool) -> tuple[list[int], list[int]]:
    """(the specials before, the specials after) the tokenizer puts around a sentence; the
    ones after always start with </s>."""
    text = " ".join(words)
    kwargs = {"text_target": text} if target else {"text": text}
    whole = hm.tokenizer(**kwargs)["input_ids"]
    bare = hm.tokenizer(**kwargs, add_special_tokens=False)["input_ids"]
    lead = next(
        (i for i in range(len(whole) - len(bare) + 1) if whole[i : i + len(bare)] == bare), 0
    )
    prefix, suffix = whole[:lead], whole[lead + len(bare) :]
    eos = hm.model.config.eos_token_id
    if not suffix or suffix[0] != eos:
        suffix = [eos, *suffix]
    return prefix, suffix


def hf_pair_maps(
    hm: hf.HFModel, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], tick=None
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Teacher-force every pair (one at a time): its cross-attention over pieces (L, H, T, S),
    the word of each source piece, the word of each target piece."""
    target = french_code(hm)
    bos = hf.forced_bos(hm, target)
    out = []
    for src_words, tgt_words in pairs:
        s_ids, s_owner = word_pieces(hm, src_words, target=False)
        t_ids, t_owner = word_pieces(hm, tgt_words, target=True)
        s_pre, s_post = framed(hm, src_words, target=False)
        t_pre, t_post = framed(hm, tgt_words, target=True)
        t_pre = ([bos] if bos is not None and t_pre[:1] != [bos] else []) + t_pre
        src_ids, out_ids = s_pre + s_ids + s_post, t_pre + t_ids + t_post[:1]
        src, dec = hf.forced_inputs(hm, src_ids, out_ids)
        _, maps = hf.forced_pass(hm, src, dec)
        cross = maps.cross[:, 0].float().cpu().numpy()  # (L, H, T_all, S_all)
        rows = slice(len(t_pre), len(t_pre) + len(t_ids) + 1)  # the pieces, then </s>
        cols = slice(len(s_pre), len(s_pre) + len(s_ids) + 1)  # the pieces, then </s>
        kept = np.ascontiguousarray(cross[:, :, rows, cols])
        out.append((kept, np.array(s_owner, np.int64), np.array(t_owner, np.int64)))
        if tick:
            tick(1)
    return out


def french_code(hm: hf.HFModel) -> str | None:
    """A multilingual model's French code (``__fr__``, ``fra_Latn``), for the gold sets."""
    codes = hm.meta.get("language_codes") or []
    return next((c for c in codes if c.strip("_<>").lower().startswith(("fr", "fra"))), None)
