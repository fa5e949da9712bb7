"""A decoder-only or encoder model trained here as a ``save_pretrained`` folder that any tool
opens: safetensors weights, ``config.json``, a generation config, and a tokenizer around the
studio's vocabulary.

The folder is what transformers, TransformerLens, bertviz and inseq read: ``AutoModelForCausalLM``
and ``AutoTokenizer.from_pretrained`` open it with nothing of the studio installed. The tokenizer
is a ``PreTrainedTokenizerFast``: a word ``Vocab`` becomes a ``tokenizers`` WordLevel model, a
``BPEVocab`` keeps its own tokenizer; both read a text as training did (d2l's preprocessing:
``core.corpus.text.tokenizers_preprocessing``), put ``<bos>`` before it and name
``<pad> <bos> <eos> <unk>`` as such. ``config.json`` carries one studio entry,
``attention_studio`` (``STUDIO_KEY``): the task the model was trained on and, for translation
and lm, the layout it read (``source <eos> <bos>`` then the target: ``LAYOUT``), so that the
studio's door reads the model as it was trained (``core.model.lm_loading``). An encoder's
folder is a BERT's (``BertForMaskedLM``, ``AutoModelForMaskedLM`` opens it) with
``encoder_tokenizer``: the same reading, ``<bos> … <eos>`` as its [CLS] and [SEP], and its
mask token. No machine path is written inside; the folder is written beside its place and
swapped in, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from core.corpus.bpe import PREFIX
from core.corpus.text import tokenizers_preprocessing
from core.corpus.vocab import BOS, EOS, PAD, UNK, Vocab
from core.model.encoder_trainee import ENCODER, MASK
from core.model.hf_config import STUDIO_KEY
from core.model.hf_folder import CONFIG
from core.model.prompt import TRAINED_LAYOUT as LAYOUT

TOKENIZER_CLASS = (
    "PreTrainedTokenizerFast"  # transformers 5 writes "TokenizersBackend", 4 not knowing it
)
PATH_KEYS = ("_name_or_path", "name_or_path", "_commit_hash")  # where a machine path may go


def studio_tokenizer(vocab: Vocab):
    """A ``tokenizers`` Tokenizer of the studio's vocabulary (its ids unchanged) that reads raw
    text as the corpus was read (``d2l_reading``) and writes pieces back as training spaced
    them ("pi ##ece" -> "piece", "moi ." not "moi.")."""
    from tokenizers import Tokenizer, decoders, models

    if vocab.kind == "word":
        tok = Tokenizer(models.WordLevel(vocab=dict(vocab.stoi), unk_token=UNK))
    else:
        tok = Tokenizer.from_str(vocab.tokenizer_json)
        tok.decoder = decoders.WordPiece(prefix=PREFIX, cleanup=False)
    d2l_reading(tok)
    return tok


SPECIAL_TOKENS = {"pad_token": PAD, "bos_token": BOS, "eos_token": EOS, "unk_token": UNK}


def fast_tokenizer(vocab: Vocab, max_positions: int):
    """A ``PreTrainedTokenizerFast`` of the studio's vocabulary (its ids unchanged), putting
    ``<bos>`` before each text of at most ``max_positions`` tokens."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = studio_tokenizer(vocab)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, Vocab.bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=max_positions, **SPECIAL_TOKENS
    )


def d2l_reading(tok) -> None:
    """Make a ``tokenizers`` Tokenizer read raw text as the studio's corpus was read (d2l's
    preprocessing, ``core.corpus.text.preprocess``): no-break spaces as spaces, ’ as ', lower
    case, and , . ! ? split from the words before them; then the words at white space
    (``core.corpus.text.tokenizers_preprocessing``: equal to ``tokenize``, tested)."""
    tok.normalizer, tok.pre_tokenizer = tokenizers_preprocessing()


def encoder_tokenizer(vocab: Vocab, max_positions: int):
    """A BERT-style ``PreTrainedTokenizerFast`` of the studio's vocabulary (its ids unchanged)
    and the encoder's mask token (``MASK``, id ``len(vocab)``): ``<bos> a <eos>``, a pair
    ``<bos> a <eos> b <eos>`` (token types 0 then 1), read as the corpus was (``d2l_reading``),
    naming cls (<bos>), sep (<eos>), mask, pad and unk as such."""
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast

    tok = studio_tokenizer(vocab)
    tok.add_special_tokens([AddedToken(MASK, special=True, normalized=False)])
    if tok.token_to_id(MASK) != len(vocab):
        raise ValueError(f"the mask token must follow the vocabulary (id {len(vocab)})")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0 {EOS}:0",
        pair=f"{BOS}:0 $A:0 {EOS}:0 $B:1 {EOS}:1",
        special_tokens=[(BOS, Vocab.bos_id), (EOS, Vocab.eos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        cls_token=BOS,
        sep_token=EOS,
        mask_token=MASK,
        model_max_length=max_positions,
        **SPECIAL_TOKENS,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def export_folder(
    trainee, vocab: Vocab, path, task: str = "translation", data_config: dict | None = None
) -> Path:
    """Write ``trainee`` (a ``core.model.trainee.DecoderTrainee``, which imports this module,
    or a ``core.model.encoder_trainee.EncoderTrainee``: a BERT folder, ``encoder_tokenizer``)
    and ``vocab`` (its one vocabulary) as a ``save_pretrained`` folder at
    ``path``, replacing any folder there whole; ``task`` ("translation", "lm", "induction") and the
    run's data settings (``data_config``, as its checkpoints record them: the corpus by name,
    so ``python -m core.evaluate`` splits it as the run did) are recorded in config.json's
    studio entry. Returns the folder."""
    path = Path(path)
    new, old = path.with_name(path.name + ".new"), path.with_name(path.name + ".old")
    for leftover in (new, old):
        shutil.rmtree(leftover, ignore_errors=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards": a line for people, not a log
    trainee.lm.save_pretrained(new, safe_serialization=True)
    tokenizer = encoder_tokenizer if trainee.cfg.arch == ENCODER else fast_tokenizer
    tokenizer(vocab, trainee.cfg.max_positions).save_pretrained(new)
    prompted = task != "induction" and trainee.decodes  # the lm task read the same text:
    # sentence <eos> <bos> translation <eos>, packed (an encoder reads no prompt)
    entry = {"task": task} | ({"layout": LAYOUT} if prompted else {})
    _settle_config(new / CONFIG, entry | ({"data": data_config} if data_config else {}))
    for file in sorted(new.iterdir()):
        _sync(file)
    _swap(new, path, old)
    return path


def _settle_config(config_file: Path, entry: dict) -> None:
    """config.json without an attention implementation or a machine path, with the studio's
    entry added; the tokenizer's and generation configs without a machine path (the
    folder is not in its place yet: no reader sees them written)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for key in ("attn_implementation", "_attn_implementation", *PATH_KEYS):
        config.pop(key, None)
    config[STUDIO_KEY] = entry
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for name in ("tokenizer_config.json", "generation_config.json"):
        other = config_file.with_name(name)
        if other.is_file():
            data = {k: v for k, v in json.loads(other.read_text("utf-8")).items()
                    if k not in PATH_KEYS}  # fmt: skip
            if "tokenizer_class" in data:  # the class every version of transformers knows
                data["tokenizer_class"] = TOKENIZER_CLASS
            other.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _sync(file: Path) -> None:
    """The file's data on the disk (fsync)."""
    with open(file, "rb") as f:
        os.fsync(f.fileno())


def _swap(new: Path, path: Path, old: Path) -> None:
    """``new`` (a whole folder) in ``path``'s place: the folder there renamed away, the new one
    renamed in, the old one deleted."""
    if path.exists():
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)
