"""The probe sentences a run translates at each evaluation: their translations and attention
maps as the run's snapshots keep them (float16, CPU), the training's random streams untouched."""

from __future__ import annotations

from collections.abc import Sequence

from core.corpus.text import D2L_TEST_PAIRS
from core.corpus.vocab import Vocab
from core.model.decode import translate
from core.model.parts import TranslationError
from core.model.transformer import Transformer
from core.training.config import D2L_PROBES
from core.training.random_streams import kept_random_streams


def probe_sentences(probes: Sequence[str], direction: str) -> list[str]:
    """The sentences a run translates at each evaluation: its probes, or, for a French→English
    run that kept the default (d2l's English sentences), their French references."""
    if direction == "fr-en" and list(probes) == D2L_PROBES:
        return [reference for _, reference in D2L_TEST_PAIRS]
    return list(probes)


def probe_maps(
    model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, sentences: Sequence[str]
) -> list[dict]:
    """Each probe's tokens and maps (a probe the model cannot translate is left out)."""
    probes = []
    for sentence in sentences:
        try:
            with kept_random_streams():
                t = translate(model, src_vocab, tgt_vocab, sentence)
        except TranslationError:
            continue
        maps = t.attention
        probes.append(
            {
                "sentence": sentence,
                "src_tokens": t.src_tokens,
                "output_tokens": t.output_tokens,
                "decoder_inputs": t.decoder_inputs,
                "encoder": maps.encoder.half(),
                "decoder_self": maps.decoder_self.half(),
                "cross": maps.cross.half(),
            }
        )
    return probes
