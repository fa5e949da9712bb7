"""What the Train page shows right after Launch: the form folded up, the new run in view.

Launch sits at the foot of a long form; the new run's status used to appear thousands of
pixels below it. After a launch, the "New run" expander and its "Advanced" one are drawn
closed, and a note on the new run sits right under the folded form, directly above the
run's live status and curves, scrolled into view.

Whether an expander is open is the browser's own state, kept per key (opening one costs no
rerun). Each launch gives both expanders new keys (fold_key): the browser draws them as
their ``expanded`` says, closed, whatever the user did to the old ones.
"""

from __future__ import annotations

import streamlit as st

from core.runs import status as run_status
from core.runs.status import RunInfo
from pages.ui.text import md

LAUNCHES = "launches"  # session key: how many runs this session has launched
LAUNCHED = "launched_run"  # session key: the run this session has just launched (read once)
NOTE_KEY = "launched"  # the note's container (CSS class st-key-launched)
SCROLL_SCRIPT = """<style>.st-key-%(key)s { scroll-margin-top: 8rem; }</style>
<script>
(() => {  // again while the page settles (the form folds up above), until the user scrolls
  let last = null, still = 0, tries = 0, stop = false;
  for (const e of ["wheel", "touchstart", "keydown", "mousedown"]) {
    window.addEventListener(e, () => { stop = true; }, {capture: true, once: true});
  }
  const show = () => {
    if (stop || ++tries > 80) return;
    const note = document.querySelector(".st-key-%(key)s");
    if (note) {  // the folded "New run" above it stays in view (scroll-margin-top)
      const top = Math.round(note.getBoundingClientRect().top);
      const want = parseFloat(getComputedStyle(note).scrollMarginTop) || 0;
      if (Math.abs(top - want) > 1) note.scrollIntoView({block: "start"});
      still = top === last ? still + 1 : 0;
      last = top;
      if (still >= 5) return;  // in place for half a second
    }
    setTimeout(show, 100);
  };
  show();
})();
</script>"""


def note_launch(run_id: str) -> None:
    """Remember a launch: the next run of the page folds the form and shows this run."""
    st.session_state[LAUNCHED] = run_id
    st.session_state[LAUNCHES] = st.session_state.get(LAUNCHES, 0) + 1


def just_launched() -> str | None:
    """The run this session has just launched (once; None on every other run of the page)."""
    return st.session_state.pop(LAUNCHED, None)


OPEN_AT_FIRST = "new_run_open"  # session key: whether "New run" started open (decided once)


def form_open_at_first(run_shown: bool) -> bool:
    """Whether "New run" starts open: where the page first showed no run, until this session
    launches one. With a run shown it starts folded, one click from open (issue 69: drawn
    open above a run, the first click on it folded it: "nothing visible"). Decided on the
    session's first run of the page, so a run launched elsewhere never folds a form being
    filled in (a new ``expanded`` on the same key redraws it)."""
    if st.session_state.get(LAUNCHES, 0):
        return False
    return st.session_state.setdefault(OPEN_AT_FIRST, not run_shown)


def fold_key(name: str) -> str:
    """The key of one of the form's expanders, new after each launch (so it is drawn closed)."""
    return f"{name}-{st.session_state.get(LAUNCHES, 0)}"


def launched_note(run_id: str, runs: list[RunInfo]) -> None:
    """The new run, what it is doing and where to watch it, right below the folded form."""
    info = next((r for r in runs if r.run_id == run_id), None)
    doing = run_status.doing_now(info) if info else "starting the trainer"
    what = f" ({md(info.label.split(' · ', 1)[-1])})" if info and " · " in info.label else ""
    with st.container(key=NOTE_KEY):
        st.success(
            f"Launched run **{md(run_id)}**{what}: {md(doing)}. Its live status, progress and "
            "curves follow right below. To launch another, open **New run** above.",
            icon=":material/rocket_launch:",
        )
    scroll_into_view(NOTE_KEY)


def scroll_into_view(key: str) -> None:
    """Scroll the browser to the container with ``key`` (st.html running a fixed script)."""
    st.html(SCROLL_SCRIPT % {"key": key}, unsafe_allow_javascript=True)
