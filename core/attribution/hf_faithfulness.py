"""What faithfulness (``core.attribution.faithfulness``) needs of a Hugging Face model: its
greedy translations of the sample, the source words among its pieces, its ``<unk>`` id for
occlusion, and log p(y_t) of one output after many equally long sources.

Shape key: N sources in one batch, S source pieces (the tokenizer's specials included), T
output tokens, V vocabulary.
"""

from __future__ import annotations

import torch

from core.attention.hf_importance import HFMeasures, HFSample
from core.corpus.bpe import PREFIX
from core.model import hugging_face as hf
from core.model.hf_folder import HFModelError

ROWS_PER_PASS = 32  # occluded copies per teacher-forced pass ((N, T, V) logits of a big vocabulary)


def unk_id(hm: hf.HFModel) -> int:
    """The id an occluded piece becomes: the tokenizer's unknown token."""
    unk = hm.tokenizer.unk_token_id
    if unk is None:
        raise HFModelError("This model's tokenizer has no unknown token to occlude words with.")
    return int(unk)


def source_spans(hm: hf.HFModel, src_ids) -> list[tuple[int, int]]:
    """[start, end) of each source word among the pieces the model reads; the tokenizer's
    specials (</s>, a language code) belong to no word; an unknown word is a word."""
    specials = set(hm.tokenizer.all_special_ids) - {hm.tokenizer.unk_token_id}
    spans: list[list[int]] = []
    joinable = False
    for i, (token_id, token) in enumerate(zip(src_ids, hf.shown_tokens(hm, src_ids))):
        if token_id in specials:
            joinable = False
            continue
        if joinable and token.startswith(PREFIX) and len(token) > len(PREFIX):
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
        joinable = True
    return [(a, b) for a, b in spans]


def translations(hm: hf.HFModel, sample: HFSample, target_lang: str | None = None):
    """[(source ids, output ids, word spans)] of every sample sentence: greedy ``generate``
    in batches, each output cut after its first </s> (the start token left out)."""
    measures = HFMeasures(hm, sample, target_lang)
    eos = hm.model.config.eos_token_id
    out = []
    for src, ids in zip(sample.src_ids, measures.output_ids([[]])[0]):
        ids = ids[: ids.index(eos) + 1] if eos in ids else ids
        out.append((list(src), ids, source_spans(hm, src)))
    return out


@torch.no_grad()
def output_logp(hm: hf.HFModel, sources: list[list[int]], out_ids: list[int]) -> torch.Tensor:
    """log p(y_t) of one output after each of N equally long sources: (N, T)."""
    parts = []
    for i in range(0, len(sources), ROWS_PER_PASS):
        rows = sources[i : i + ROWS_PER_PASS]
        src, dec = hf.forced_inputs(hm, rows[0], out_ids)  # (1, S), (1, T)
        src = torch.tensor(rows, device=src.device)  # (N, S)
        logits = hm.model(
            input_ids=src, decoder_input_ids=dec.expand(len(rows), -1), return_dict=True
        ).logits  # (N, T, V)
        out = torch.tensor(out_ids, device=src.device).expand(len(rows), -1)  # (N, T)
        logp = logits.float().log_softmax(-1).gather(-1, out[..., None])[..., 0]  # (N, T)
        parts.append(logp.cpu())
    return torch.cat(parts)
