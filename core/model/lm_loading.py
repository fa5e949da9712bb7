"""Open a decoder-only model folder (``save_pretrained`` layout) as a ``PromptedModel``, a
masked language model's (BERT, RoBERTa, DistilBERT, ELECTRA) as a ``MaskedModel``: the
rules of every Hugging Face folder (safetensors only, no remote code, every parameter in the
files) and the server's memory limit counted in the dtype it will hold.

A model whose float32 weights pass the limit but whose bfloat16 ones fit is opened in bfloat16
where the device computes it natively (a GPU that supports it, or a CPU with AVX-512 BF16 or
AMX), and says so (``meta["dtype"]``); elsewhere it is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.model import hugging_face as hf
from core.model.capabilities import MASKED_LM
from core.model.hf_config import lm_config, studio_data, studio_layout, studio_task
from core.model.hf_folder import HFModelError, describe
from core.model.hf_model import from_folder, held_parameters
from core.model.masked import MaskedModel
from core.model.prompted import PromptedModel
from core.places import shown_path

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of a CPU computing bf16


def native_bfloat16(device) -> bool:
    """Whether ``device`` computes bfloat16 natively (not by emulation, many times slower)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return any(f" {flag}" in flags for flag in NATIVE_BF16_FLAGS)


def held_dtype(count: int, max_bytes: int | None, device) -> torch.dtype:
    """float32, or bfloat16 where only that fits and the device computes it natively;
    HFModelError in one line where neither will do."""
    if max_bytes is None or 4 * count <= max_bytes:
        return torch.float32
    size = f"{count / 1e6:,.0f} M parameters ({4 * count / 2**30:.1f} GB in float32"
    limit = f"this server opens models of at most {max_bytes / 2**30:.2f} GB"
    if 2 * count <= max_bytes:
        if native_bfloat16(device):
            return torch.bfloat16
        raise HFModelError(
            f"This model has {size}, {2 * count / 2**30:.1f} GB in bfloat16); {limit}, and "
            "this processor has no native bfloat16 to hold it in half the memory."
        )
    raise HFModelError(f"This model has {size}); {limit}.")


def end_ids(tokenizer) -> frozenset:
    """Ids that end a prompted translation: the end of text, and every token holding a new
    line."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    ends = {i for i, text in enumerate(texts) if "\n" in text}
    if tokenizer.eos_token_id is not None:
        ends.add(int(tokenizer.eos_token_id))
    return frozenset(ends)


def load(folder, device: str | torch.device = "cpu", max_bytes: int | None = None):
    """A decoder-only model folder as a PromptedModel, a masked language model's as a
    MaskedModel (eager attention, eval mode)."""
    folder = Path(folder)
    info = describe(folder)
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    masked = info["family"] == MASKED_LM
    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM

    def dtype() -> dict:  # the memory limit, counted in the dtype the server will hold
        count = held_parameters(info)
        return {"dtype": held_dtype(count, max_bytes, device)}

    model, tokenizer = from_folder(folder, auto, dtype)
    model.to(device).eval()
    info["tokens"] = hf.tokenizer_kind(tokenizer)
    info["pieces"] = hf.tokenizer_algorithm(tokenizer)
    info["dtype"] = str(model.dtype).removeprefix("torch.")
    config = model.config.to_dict()
    cfg = lm_config(config)
    if task := studio_task(config):  # trained here: an induction model reads no prompt
        info["task"] = task
    if layout := studio_layout(config):  # trained here on translation: no template
        info["layout"] = layout
    if data := studio_data(config):  # trained here: its run's corpus and split
        info["data_config"] = data
    if masked:
        if tokenizer.mask_token_id is None:
            raise HFModelError(f"{shown_path(folder)}'s tokenizer has no mask token to fill.")
        return MaskedModel(model, tokenizer, cfg, info)
    return PromptedModel(model, tokenizer, cfg, info, ends=end_ids(tokenizer))
