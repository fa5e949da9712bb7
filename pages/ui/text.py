"""User text inside Markdown: shown literally, never as formatting, links, HTML or directives."""

from __future__ import annotations

import re

# every ASCII punctuation character: CommonMark lets a backslash make each one literal, which
# also defuses Streamlit's additions (:red[...], :material/...:, $math$) and GFM autolinks
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_BACKTICKS = re.compile(r"`+")


def md(text: object) -> str:
    """``text`` escaped for st.markdown, st.error, st.caption...: it shows as typed."""
    return _PUNCTUATION.sub(r"\\\1", str(text))


def code(text: object) -> str:
    """``text`` as an inline code span that shows as typed, whatever backticks it holds."""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
