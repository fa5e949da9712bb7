"""Sentences as d2l reads them: its preprocessing, word tokens, and the chapter's test pairs."""

from __future__ import annotations

ATTRIBUTION = (
    "English-French pairs from the Tatoeba Project (tatoeba.org), packaged by "
    "manythings.org/anki, licensed CC-BY 2.0 (France)."
)


D2L_TEST_PAIRS = [  # the sentences and references of d2l.ai chapter 11.7's check
    ("go .", "va !"),
    ("i lost .", "j'ai perdu ."),
    ("he's calm .", "il est calme ."),
    ("i'm home .", "je suis chez moi ."),
]


def preprocess(text: str) -> str:
    """d2l preprocessing: no-break spaces to spaces, lower case, space before , . ! ?

    Also writes the typographic apostrophe (’) as ' so "j’ai" and "j'ai" are one word.
    """
    text = text.replace("\u202f", " ").replace("\xa0", " ").replace("\u2019", "'")
    text = text.lower().strip()
    out = []
    for i, ch in enumerate(text):
        if i > 0 and ch in ",.!?" and text[i - 1] != " ":
            out.append(" ")
        out.append(ch)
    return "".join(out)


def tokenize(text: str) -> list[str]:
    """Preprocess and split into word tokens."""
    return preprocess(text).split()


def tokenizers_preprocessing():
    """(normalizer, pre-tokenizer) of the ``tokenizers`` library that cut a text into the words
    ``tokenize`` gives (the same spaces, lower case, and , . ! ? split from the word before
    them): what a ``save_pretrained`` tokenizer of a model trained here reads text with."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    normalizer = normalizers.Sequence(
        [
            normalizers.Replace("\u202f", " "),
            normalizers.Replace("\xa0", " "),
            normalizers.Replace("\u2019", "'"),
            normalizers.Lowercase(),
        ]
    )
    words = pre_tokenizers.Sequence(
        [  # "a.b" -> "a", ".b" as preprocess() puts a space before the mark only
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex("[,.!?]"), behavior="merged_with_next"),
        ]
    )
    return normalizer, words
