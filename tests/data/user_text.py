"""A script showing a stranger's text through pages.ui.text.md (a test fixture): does any of
it render as a link, formatting or HTML in the browser?"""

import streamlit as st

from pages.ui.text import md

TEXT = (
    "**bold** [x](http://evil.example/a) <b>html</b> :red[red] $z$ http://evil.example/b "
    "HTTPS://evil.example/c www.evil.example user@evil.example <http://evil.example/d> "
    "mailto:someone@evil.example xmpp:someone@evil.example"
)
st.warning(f"Run '{md(TEXT)}' is not on this server any more.")
st.markdown(md(TEXT))
st.caption(md(TEXT))
