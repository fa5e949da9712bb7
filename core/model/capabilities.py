"""What a model cannot do, and why, in one line: the one table every refusal comes from.

``problem(family, model_type, what)`` answers for a section of the Attention page, an
attribution method, a setting (``bfloat16``) or what a model does at all (``translate``;
``decoding``: writing its output step by step; ``sentence``: reading a sentence at all). What
a family's row does not name, every model of it does; a model type's row (T5) adds to its
family's, and a task's row (a model trained here on the induction task reads no sentence) to
both. ``TranslationModel.supports`` reads it; the pages and commands ask it before they offer
or compute anything. Replaying a run (``training``) is decided from the disk instead, whatever
the family: ``replay_problem`` refuses a model with no run or .history beside it, or one whose
history keeps no snapshots. ``table`` prints the table for docs/hugging-face.md,
``families_table`` its brief (families × sections) for the README; tests compare both.
"""

from __future__ import annotations

from core.model.architectures import ARCHITECTURES, RELATIVE

STUDIO = "studio"
HUGGING_FACE = "hugging face"
LANGUAGE_MODEL = "language model"  # a decoder-only model translating by a prompt
MASKED_LM = "masked language model"  # an encoder-only model filling [MASK] tokens

NOT_TRAINED_HERE = "A Hugging Face model was not trained here: it has no snapshots to replay."
NO_HISTORY = (  # "training" where no run directory holds the model and no .history is beside it
    "This model has no training history here: no run directory holds it and no .history file "
    "lies beside it (a model downloaded, or trained elsewhere), so it has no snapshots to "
    "replay. Runs trained here, of every architecture, keep snapshots at every evaluation."
)
NO_SNAPSHOTS = (  # "training" where its history holds none
    "This model's training history keeps no attention snapshots (a one-stack run trained "
    "before they were kept, or one whose snapshots did not fit its disk budget); where it "
    "measured circuit scores, its heads over training: python -m core.circuits --run <its run "
    "or .history file>."
)

NO_TEMPLATE = (  # "template": a prompt template is read by a decoder-only language model
    "This model reads no prompt: a prompt template is what a decoder-only language model "
    "translates by."
)
NO_PROMPT = (  # "template" (and a sentence's note) for a decoder trained here on induction
    "This model was trained here on the induction task: it reads no sentence and no prompt, "
    "only its start token and the tokens after it."
)
TRAINED_PROMPT = (  # "template" for a decoder trained here on translation
    "This model was trained here on translation: it reads the sentence, <eos> and <bos>, then "
    "writes the translation; it takes no prompt template."
)
NOT_OWN_SPLIT = (  # "own_split": where its validation sentences come from
    "This model was not trained here: it has no validation split of its own; its sample is the "
    "first validation sentences of fra-eng as the studio splits it by default, given to the "
    "model as text."
)
ONE_ATTENTION = (  # "cross_attention": what the attention method reads on a one-stack model
    "A model of one stack has no cross-attention: the attention method reads its one "
    "attention, each output row's weights over the sentence and the prefix before it, "
    "renormalised over those; like any raw attention it ignores the residual stream and what "
    "the values carry."
)
BY_FAMILY: dict[str, dict[str, str]] = {
    STUDIO: {
        "bfloat16": "The studio's own models are small: they are measured exactly, in float32.",
        "template": NO_TEMPLATE,
    },
    HUGGING_FACE: {
        "supervision": "Supervision is compared between two of the studio's own checkpoints: "
        "a Hugging Face model was not trained here.",
        "template": NO_TEMPLATE,
        "own_split": NOT_OWN_SPLIT,
    },
    LANGUAGE_MODEL: {
        "supervision": "Supervision is compared between two of the studio's own checkpoints: "
        "a Hugging Face model was not trained here.",
        "own_split": NOT_OWN_SPLIT,
        "importance_bleu": "A language model's head importance is measured by its loss alone "
        "(each sentence's first reference after its prompt): BLEU would need every head's "
        "prompted translations, 4x the work.",
        "cross_attention": ONE_ATTENTION,
    },
}

SENTENCE_WORK = (  # the sections that read a source sentence and its translation, in words
    ("alignment", "alignment"),
    ("attribution", "attribution"),
    ("patch", "patching"),
    ("compare", "comparing two models' translations"),
    ("d2l", "the d2l chapter's BLEU check"),
    ("evaluate", "BLEU on a split"),
    ("force", "rating a translation you type"),
)
NO_TRANSLATION = (
    "A masked language model (BERT, RoBERTa, DistilBERT, ELECTRA) fills [MASK] tokens of one "
    "sentence; it does not translate, so {what} (which compares a source with its "
    "translation) does not apply."
)
ONE_PASS = (
    "A masked language model fills every mask token at once, in one pass over the sentence: "
    "it has no decoding steps to play back (the Maps show that pass; the Logit lens shows "
    "each layer's guess for each mask)."
)
BY_FAMILY[MASKED_LM] = {
    "cross_attention": ONE_ATTENTION,
    "supervision": NOT_TRAINED_HERE,
    "template": NO_TEMPLATE,
    "own_split": NOT_OWN_SPLIT,
    "decoder_side": "A masked language model reads one sentence with one stack: its tokens are "
    "the encoder side's.",  # the decoder side's token states (the projector's sides)
    "importance_bleu": "A masked language model writes no translation: its head importance is "
    "measured by its masked-LM loss alone.",
    "playback": ONE_PASS,
    "decoding": ONE_PASS,  # writing its output step by step, each step reading the last
    "head_scores": "A masked language model reads its sentence both ways and predicts no next "
    "token: the in-context-learning score reads a model that writes token by token (core."
    "attention.head_detectors); its heads' previous-token, duplicate-token and induction "
    "weights are the Maps' head roles.",
    "translate": "A masked language model (BERT, RoBERTa, DistilBERT, ELECTRA) fills [MASK] "
    "tokens of one sentence; it does not translate.",
    "shared_passes": "A masked language model's predicted positions (its masks) differ from "
    "sentence to sentence: a file's sentences are explained one at a time, not in shared passes.",
    "patch_prefix": "A masked language model fills its masks in one pass: patching reads the "
    "logit difference at the sentence's first mask, after no target prefix (leave it empty).",
    **{
        what: NO_TRANSLATION.format(what=words)
        for what, words in SENTENCE_WORK
        if what not in ("attribution", "patch")  # the filled token at each mask, explained
        # over its sentence; two sentences' first masks, patched one into the other
    },
}

T5_IG = (
    "Integrated gradients from zero embeddings does not converge for T5: its RMSNorm maps "
    "α·e to nearly e for every α > 0 and no absolute position is added, so the change sits "
    "at α ≈ 0 (completeness off by 65 % with 512 steps on a test model); use gradient × input."
)
BY_MODEL_TYPE: dict[str, dict[str, str]] = {  # T5, mT5, UMT5: no absolute position added;
    # and what each row's mathematics does not allow (its ``refuses``)
    name: ({"integrated-gradients": T5_IG} if row.positions == RELATIVE else {}) | dict(row.refuses)
    for name, row in ARCHITECTURES.items()
    if row.positions == RELATIVE or row.refuses
}


NO_SENTENCE = (
    "This model was trained here on the induction task (random tokens read twice): it reads "
    "no sentence, so {what} does not apply; its head scores read it on its own tokens "
    "(python -m core.head_scores)."
)
BY_TASK: dict[str, dict[str, str]] = {  # a model trained here on a task other than translation
    "induction": {
        what: NO_SENTENCE.format(what=words)
        for what, words in (("translate", "translating"), *SENTENCE_WORK)
    },
}
BY_TASK["translation"] = {"template": TRAINED_PROMPT}  # a decoder trained here reads its layout
BY_TASK["lm"] = {  # its text was the corpus's pairs in that layout, packed
    "template": "This model was trained here on the lm task: it read the corpus's text, each "
    "sentence, <eos> and <bos>, then its translation; it reads a sentence the same way and "
    "takes no prompt template."
}
BY_TASK["induction"] |= {
    "template": NO_PROMPT,
    "sentence": "This model was trained here on the induction task: it reads no sentence and no "
    "prompt, only a start token and the tokens after it; the page reads it on a token sequence "
    "(by default the first its training scored its heads on: random tokens read twice).",
    "project": "This model was trained here on the induction task: its tokens are random, with "
    "no validation sentences to place; Where tokens live reads a model trained on sentences.",
    "importance": "This model was trained here on the induction task: it reads no validation "
    "sentence, so head importance (each head removed, the loss on them) does not apply; pick "
    "heads to remove by hand (Remove heads), or read its head scores (python -m "
    "core.head_scores).",
}


def replay_problem(has_history: bool, snapshot_steps: int) -> str | None:
    """Why "training" (replaying a run) cannot be shown, decided from what is on disk: whether
    a run directory or a .history file holds the model's history, and how many snapshot steps
    it keeps (``core.runs.history``), whatever the model's family; None when it can."""
    if not has_history:
        return NO_HISTORY
    return None if snapshot_steps else NO_SNAPSHOTS


def problem(family: str, model_type: str, what: str, task: str = "") -> str | None:
    """Why a model of this family and type (trained here on ``task``, where it says) cannot
    do ``what``; None when it can."""
    return (
        BY_TASK.get(task, {}).get(what)
        or BY_MODEL_TYPE.get(model_type, {}).get(what)
        or BY_FAMILY.get(family, {}).get(what)
    )


FAMILIES = (STUDIO, HUGGING_FACE, LANGUAGE_MODEL, MASKED_LM)  # the table's columns, in order


def table() -> str:
    """The capability table in Markdown, as docs/hugging-face.md shows it (a test compares):
    what each family does (every ``what`` some family's row names), then what each model type's
    row refuses besides."""
    whats = sorted({what for row in BY_FAMILY.values() for what in row})
    lines = ["| what | " + " | ".join(FAMILIES) + " |", "|---" * (len(FAMILIES) + 1) + "|"]
    for what in whats:
        cells = ("no" if BY_FAMILY.get(f, {}).get(what) else "yes" for f in FAMILIES)
        lines.append(f"| `{what}` | " + " | ".join(cells) + " |")
    lines += ["", "| model type | refuses besides its family's |", "|---|---|"]
    for model_type, row in sorted(BY_MODEL_TYPE.items()):
        lines.append(f"| `{model_type}` | " + ", ".join(f"`{what}`" for what in sorted(row)) + " |")
    return "\n".join(lines) + "\n"


FAMILY_WORDS = {  # each family as the README's table names it
    STUDIO: "the studio's own",
    HUGGING_FACE: "Hugging Face encoder-decoder",
    LANGUAGE_MODEL: "language model (decoder-only)",
    MASKED_LM: "masked language model",
}
SECTION_WORDS = (  # (what, label): the sections a newcomer looks for, the Attention page's labels
    ("translate", "Translate"),  # the Translate page
    ("maps", "Maps"),
    ("playback", "Decoding playback"),
    ("attribution", "Attribution"),
    ("alignment", "Alignment"),
    ("inside", "Inside a head"),
    ("lens", "Logit lens"),
    ("head_roles", "Head roles"),
    ("head_scores", "Head scores"),
    ("patch", "Patching"),
    ("ablation", "Remove heads"),
    ("compare", "Compare"),
)


def families_table() -> str:
    """The capability table in brief, as the README shows it (a test compares): each family a
    row, each section a newcomer looks for a column (✓ where the family's row does not refuse
    it), then what a model type refuses besides, its methods grouped."""
    lines = ["| | " + " | ".join(label for _, label in SECTION_WORDS) + " |"]
    lines.append("|---" * (len(SECTION_WORDS) + 1) + "|")
    for family in FAMILIES:
        refused = BY_FAMILY.get(family, {})
        cells = ("—" if refused.get(what) else "✓" for what, _ in SECTION_WORDS)
        lines.append(f"| {FAMILY_WORDS[family]} | " + " | ".join(cells) + " |")
    types: dict[tuple[str, ...], list[str]] = {}
    for model_type, row in sorted(BY_MODEL_TYPE.items()):
        types.setdefault(tuple(sorted(row)), []).append(f"`{model_type}`")
    besides = "; ".join(
        f"{', '.join(names)}: {', '.join(f'`{what}`' for what in whats)}"
        for whats, names in types.items()
    )
    return "\n".join(lines) + f"\n\nRefused besides, by model type: {besides}.\n"
