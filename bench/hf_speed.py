"""A Hugging Face encoder-decoder at the size people study, against its own ``generate``.

Builds a random-weight model with opus-mt-en-fr's configuration (MarianMT: d 512, 6+6
layers, 8 heads, FFN 2048, a 59,514-token vocabulary, ~75 M parameters) and a word-level
tokenizer of that size, saves it with ``save_pretrained`` into a temporary folder, and
prints (medians of interleaved repeats):

- load: seconds to open the folder as the studio does (``core.model.hf_model.load``);
- translate: one 20-token sentence, 20 output tokens, plain greedy ``generate`` against the
  studio's translation with every map of all three kinds (``generate`` + one teacher-forced
  pass with ``output_attentions``), and the ratio;
- the same with beam 4;
- remove heads: the translation with all cross-attention heads of one layer removed;
- head importance: every one of the 144 heads removed alone on 50 sentences of 4-12 words
  (Tatoeba's validation sentences are 3-12): BLEU of greedy ``generate`` and teacher-forced
  loss per head, the gradient scores and the 48-point pruning curve
  (``core.attention.importance.head_importance``), once;
- memory: the process's peak resident set after loading and translating;
- page: the Attention page's own work (Streamlit's AppTest, in this process: what the server
  computes, not the browser's drawing) the first time, model load included, and after a
  new sentence typed (the model already open), 20 output tokens.

    python bench/hf_speed.py --repeats 5

Random weights never emit </s>, so every output runs to the same 20 tokens in both columns.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.attention.ablation import HeadSpec, ablated  # noqa: E402
from core.attention.head_measures import resolved_precision  # noqa: E402
from core.model import hugging_face as hf  # noqa: E402
from core.model.hf_model import load  # noqa: E402
from core.model.parts import DecodeSettings  # noqa: E402

OPUS_EN_FR = {  # Helsinki-NLP/opus-mt-en-fr's config.json, sizes only
    "vocab_size": 59514,
    "decoder_vocab_size": 59514,
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "max_position_embeddings": 512,
    "pad_token_id": 59513,
    "eos_token_id": 0,
    "decoder_start_token_id": 59513,
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "static_position_embeddings": True,
    "activation_function": "swish",
}
SENTENCE = " ".join(f"w{i}" for i in range(19)) + " ."  # 20 words, 21 tokens with </s>


def build(folder: Path) -> None:
    """Save a random opus-mt-en-fr-sized Marian model and a tokenizer of its vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import MarianConfig, MarianMTModel, PreTrainedTokenizerFast

    words = ["</s>", "<unk>", ".", *(f"w{i}" for i in range(59514 - 4)), "<pad>"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 0)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(**OPUS_EN_FR)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def page_seconds(folder: Path, repeats: int) -> tuple[float, float]:
    """(first run with the model load, median run after a new sentence) of the Attention page
    over this model folder, through AppTest."""
    import os

    from streamlit.testing.v1 import AppTest

    os.environ["ATTENTION_STUDIO_CHECKPOINTS"] = str(folder.parent)
    os.environ["ATTENTION_STUDIO_RUNS"] = str(folder.parent.parent / "runs")
    page = Path(__file__).resolve().parent.parent / "pages" / "attention.py"
    at = AppTest.from_file(str(page), default_timeout=600)
    at.query_params.update({"model": f"checkpoints/{folder.name}/", "max_len": "20"})
    at.query_params["sentence"] = SENTENCE
    first = timed(at.run)
    assert not at.exception, [e.message for e in at.exception]
    again = []
    for i in range(repeats):
        box = at.text_input(key="at_sentence")
        box.set_value(" ".join(f"w{i * 7 + j}" for j in range(19)) + " .")
        again.append(timed(box.run))
        assert not at.exception, [e.message for e in at.exception]
    return first, statistics.median(again)


def importance_seconds(hm, precision: str, sentences: int = 50) -> tuple[float, int]:
    """(seconds, heads) of head importance on ``sentences`` synthetic sentences of 4-12
    words, each with one reference of the same length."""
    from core.attention.importance import head_importance
    from core.corpus.splits import Split
    from core.measure.sample import sample_of

    rng = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(sentences):
        n = int(torch.randint(4, 13, (1,), generator=rng))
        words = [f"w{int(w)}" for w in torch.randint(0, 59000, (n,), generator=rng)]
        pairs.append((words + ["."], list(reversed(words)) + ["."]))
    sample = sample_of(hm, Split(pairs), sentences)
    start = time.perf_counter()
    result = head_importance(hm, sample, precision=precision)
    return time.perf_counter() - start, len(result.heads)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--no-importance", dest="importance", action="store_false")
    p.add_argument("--only-importance", action="store_true", help="skip the other figures")
    p.add_argument(
        "--precision",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="of head importance's passes (auto: bfloat16 where the CPU runs it natively)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "checkpoints" / "opus-mt-en-fr-random"
        build(folder)
        load(folder)  # the first load imports transformers: not what a server pays per model
        loads = [timed(lambda: load(folder)) for _ in range(args.repeats)]
        hm = load(folder)
        if args.only_importance:
            seconds, heads_n = importance_seconds(hm, args.precision)
            precision = resolved_precision(args.precision, hm)
            print(
                json.dumps(
                    {
                        "importance_heads": heads_n,
                        "importance_50_sentences_s": round(seconds, 1),
                        "importance_precision": precision,
                    }
                )
            )
            return
        params = sum(p.numel() for p in hm.model.parameters())
        src = hf.encode_source(hm, SENTENCE)
        rows = {}
        for beam in (1, 4):
            settings = DecodeSettings(beam_size=beam, max_len=20)
            kwargs = hf.generate_kwargs(hm, settings, None)

            def plain(kwargs=kwargs):
                with torch.no_grad():
                    hm.model.generate(input_ids=src, **kwargs)

            def studio(settings=settings):
                hm.translate(SENTENCE, settings)

            plain(), studio()  # warm-up
            pairs = [(timed(plain), timed(studio)) for _ in range(args.repeats)]
            rows[beam] = [statistics.median(col) for col in zip(*pairs)]
        heads = [HeadSpec("cross", 5, h) for h in range(8)]
        with ablated(hm, heads):
            removed = statistics.median(
                timed(lambda: hm.translate(SENTENCE, DecodeSettings(max_len=20)))
                for _ in range(args.repeats)
            )
        page_first, page_again = page_seconds(folder, args.repeats)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        importance_s, heads_n = (
            importance_seconds(hm, args.precision) if args.importance else (None, 0)
        )
    importance_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures = {
        "parameters_m": round(params / 1e6, 1),
        "threads": args.threads,
        "load_s": round(statistics.median(loads), 2),
        "greedy_generate_s": round(rows[1][0], 3),
        "greedy_with_every_map_s": round(rows[1][1], 3),
        "greedy_ratio": round(rows[1][1] / rows[1][0], 2),
        "beam4_generate_s": round(rows[4][0], 3),
        "beam4_with_every_map_s": round(rows[4][1], 3),
        "beam4_ratio": round(rows[4][1] / rows[4][0], 2),
        "greedy_8_heads_removed_s": round(removed, 3),
        "page_first_run_s": round(page_first, 2),
        "page_new_sentence_s": round(page_again, 2),
        "importance_heads": heads_n,
        "importance_50_sentences_s": importance_s and round(importance_s, 1),
        "importance_precision": resolved_precision(args.precision, hm),
        "peak_rss_mb": round(peak_mb),
        "peak_rss_after_importance_mb": round(importance_peak_mb),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
