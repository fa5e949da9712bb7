"""Decoder-only models at the size people study, against their own forward and ``generate``.

Builds random-weight models with two real configurations, GPT-2 (openai-community/gpt2: 124 M
parameters, 12 layers, 12 heads, 768 wide, learned positions) and SmolLM-135M
(HuggingFaceTB/SmolLM-135M, llama: 30 layers, 9 heads with 3 key/value heads, 576 wide,
RoPE), each with a small byte-level BPE tokenizer (``tests/lm_tiny.py``), saves them with
``save_pretrained`` into a temporary folder and prints one JSON line per model (medians of
interleaved repeats):

- load: seconds to open the folder as the studio does (``core.model.opened.open_model``);
- maps: one 64-token prompt, every layer's and head's map (``output_attentions``) against
  the same model's plain forward, and the ratio; and against the plain forward of the model
  loaded with transformers' default attention (``sdpa``, which cannot return maps); both
  sides project only the last position onto the vocabulary (``logits_to_keep=1``: the maps
  need none of the logits);
- translate: a prompted translation of 20 output tokens with every map (greedy decoding with
  a key/value cache, each step's maps kept as it runs) against the model's own greedy
  ``generate`` of 20 tokens (eager, and sdpa), and the ratios (random weights never end a
  line: every run writes the same 20 tokens);
- head importance (``--importance N``): every head removed alone on N validation sentences of
  fra-eng (``FRA_ENG_ZIP``): the loss of each sentence's first reference after its prompt
  (each head set run again from its lowest layer), gradient scores and the pruning curve,
  once, with its progress (``--device cuda``: on the GPU, in float32);
- page: the Attention page's own work over the folder (Streamlit's AppTest, in a process of
  its own: what the server computes), the first run with the model load and the median
  after a new sentence, and that process's peak resident set (VmHWM): the server's memory
  with the model open;
- memory: the bench process's peak resident set after loading, translating (and head
  importance).

    python bench/language_models.py --repeats 5 [--importance 50] [--device cuda]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.model.opened import open_model  # noqa: E402
from core.model.parts import DecodeSettings  # noqa: E402
from core.training.devices import device_description  # noqa: E402
from tests.lm_tiny import byte_level_tokenizer  # noqa: E402

CONFIGS = {
    "gpt2-124M": ("gpt2", {}),  # GPT2Config's defaults are openai-community/gpt2's sizes
    "smollm-135M": (
        "llama",
        {  # HuggingFaceTB/SmolLM-135M's config.json, sizes and flags
            "vocab_size": 49152,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "max_position_embeddings": 2048,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
        },
    ),
}
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 20


def build(name: str, folder: Path) -> Path:
    """A random model of one configuration and a small tokenizer, saved into ``folder``."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    family, sizes = CONFIGS[name]
    tokenizer = byte_level_tokenizer(bos=family == "llama")
    eos = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = GPT2Config(**eos) if family == "gpt2" else LlamaConfig(**sizes, **eos)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # a GPU's work done, not only queued
    return time.perf_counter() - start


def median_pair(a, b, repeats: int) -> tuple[float, float]:
    """Medians of two functions' times, interleaved."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(seconds(a))
        tb.append(seconds(b))
    return statistics.median(ta), statistics.median(tb)


def measure(name: str, repeats: int, importance: int, device: str = "cpu") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(name, Path(tmp) / name)
        loads = [seconds(lambda: open_model(str(folder), device)) for _ in range(3)]
        lm = open_model(str(folder), device)
        lm = dataclasses.replace(lm, ends=frozenset())  # never ends a line
        model = lm.model
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, len(lm.tokenizer), (1, PROMPT_TOKENS), generator=g).to(device)
        with torch.no_grad():
            maps, plain = median_pair(
                lambda: lm.sequence_patterns(ids[0].tolist()),
                lambda: model(input_ids=ids, logits_to_keep=1),  # the same work: no logits
                repeats,
            )
            sentence = "the boy is tall and the girl is small ."
            settings = DecodeSettings(max_len=OUTPUT_TOKENS)
            prompt = torch.tensor([lm.layout.prompt(lm.source(sentence).ids)], device=device)
            t = lm.translate(sentence, settings)
            assert len(t.out_ids) == OUTPUT_TOKENS, len(t.out_ids)
            studio, own = median_pair(
                lambda: lm.translate(sentence, settings), lambda: generate(model, prompt), repeats
            )
            fast = sdpa(folder).to(device)
            _, plain_sdpa = median_pair(
                lambda: None, lambda: fast(input_ids=ids, logits_to_keep=1), repeats
            )
            _, own_sdpa = median_pair(lambda: None, lambda: generate(fast, prompt), repeats)
        row = {
            "model": name,
            "device": device_description(lm.device),
            "parameters_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
            "load_s": round(statistics.median(loads), 3),
            "maps_64_tokens_s": round(maps, 4),
            "plain_forward_s": round(plain, 4),
            "maps_ratio": round(maps / plain, 3),
            "translate_20_with_maps_s": round(studio, 4),
            "generate_20_s": round(own, 4),
            "translate_ratio": round(studio / own, 3),
            "plain_forward_sdpa_s": round(plain_sdpa, 4),
            "maps_ratio_to_sdpa": round(maps / plain_sdpa, 3),
            "generate_20_sdpa_s": round(own_sdpa, 4),
            "translate_ratio_to_sdpa": round(studio / own_sdpa, 3),
        }
        if device == "cpu":  # the pages hold a model on the CPU
            row |= page_figures(folder, repeats)
        if importance:
            row |= head_importance(lm, folder, importance)
        row["peak_rss_MB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return row


def generate(model, prompt):
    """The model's own greedy ``generate`` of exactly OUTPUT_TOKENS tokens."""
    return model.generate(input_ids=prompt, max_new_tokens=OUTPUT_TOKENS,
                          min_new_tokens=OUTPUT_TOKENS, do_sample=False)  # fmt: skip


def sdpa(folder: Path):
    """The same weights with transformers' default attention (no maps)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()


def page_figures(folder: Path, repeats: int) -> dict:
    """The Attention page over the folder, in a process of its own (``--page FOLDER``)."""
    import subprocess

    cmd = [sys.executable, __file__, "--page", str(folder), "--repeats", str(repeats)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def page_run(folder: Path, repeats: int) -> dict:
    """(first run, median after a new sentence, VmHWM) of the Attention page, via AppTest."""
    import os

    from streamlit.testing.v1 import AppTest

    os.environ["ATTENTION_STUDIO_CHECKPOINTS"] = str(folder.parent)
    os.environ["ATTENTION_STUDIO_RUNS"] = str(folder.parent / "runs")
    page = Path(__file__).resolve().parent.parent / "pages" / "attention.py"
    at = AppTest.from_file(str(page), default_timeout=600)
    at.query_params.update({"model": f"checkpoints/{folder.name}/", "max_len": "20"})
    at.query_params["sentence"] = "the boy is tall and the girl is small ."
    first = seconds(at.run)
    assert not at.exception, [e.message for e in at.exception]
    again = []
    for i in range(repeats):
        box = at.text_input(key="at_sentence")
        box.set_value(f"the boy is tall and the girl is small {'.' * (i + 2)}")  # a new one
        again.append(seconds(box.run))
        assert not at.exception, [e.message for e in at.exception]
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:")) / 1024
    return {
        "page_first_s": round(first, 2),
        "page_new_sentence_s": round(statistics.median(again), 2),
        "page_process_peak_MB": round(hwm),
    }


def head_importance(lm, folder: Path, sentences: int = 50) -> dict:
    """Every head removed alone on ``sentences`` validation sentences, once, with its
    progress."""
    from core.attention.importance import importance_for

    seen = []
    start = time.perf_counter()
    result = importance_for(
        lm, str(folder), sentences, progress=lambda f, what: seen.append((f, what)), refresh=True
    )
    return {
        "importance_sentences": sentences,
        "importance_heads": len(result.heads),
        "importance_s": round(result.seconds, 1),  # as computed (also when read from disk)
        "importance_from_disk": result.cached,
        "importance_call_s": round(time.perf_counter() - start, 1),
        "importance_progress_updates": len(seen),
        "importance_precision": result.precision,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--importance",
        type=int,
        default=0,
        metavar="N",
        help="also head importance on N sentences (minutes; the issue asks for 50)",
    )
    p.add_argument("--model", choices=list(CONFIGS), action="append")
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the models run (cuda: no page figures, which are the CPU's)",
    )
    p.add_argument("--page", help=argparse.SUPPRESS)  # a model folder: the page's figures only
    args = p.parse_args()
    if args.page:
        print(json.dumps(page_run(Path(args.page), args.repeats)))
        return
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for name in args.model or list(CONFIGS):
        print(json.dumps(measure(name, args.repeats, args.importance, args.device)), flush=True)


if __name__ == "__main__":
    main()
