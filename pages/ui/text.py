"""User text inside Markdown: shown literally, never as formatting, links, HTML or directives."""

from __future__ import annotations

import re

import pandas as pd

from core.runs.exports import text_cell

# every ASCII punctuation character: CommonMark lets a backslash make each one literal, which
# also defuses Streamlit's additions (:red[...], :material/...:, $math$) and <...> autolinks
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# GFM's autolink literals (http://, www., user@host) are found in the text once the escapes
# are read, so a word joiner (U+2060, invisible, never a break) goes where each would begin
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)
WORD_JOINER = "\u2060"
_BACKTICKS = re.compile(r"`+")


def md(text: object) -> str:
    """``text`` escaped for st.markdown, st.error, st.caption...: it shows as typed (an
    address in it as plain text, not a link)."""
    return _PUNCTUATION.sub(r"\\\1", _AUTOLINK.sub(WORD_JOINER, str(text)))


def code(text: object) -> str:
    """``text`` as an inline code span that shows as typed, whatever backticks it holds."""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def spreadsheet_safe(table) -> pd.DataFrame:
    """A copy of a table (a DataFrame, or rows it can be built from) whose text cells (and
    texts in list cells) a spreadsheet cannot run as formulas: what ``st.dataframe``'s own
    "Download as CSV" then exports (OWASP)."""
    out = table.copy() if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(_safe_cell)
    return out


def _safe_cell(value: object) -> object:
    """A text cell prefixed with ' when it starts like a formula; lists cell by cell."""
    if isinstance(value, list | tuple):
        return [text_cell(v) for v in value]
    return text_cell(value)
