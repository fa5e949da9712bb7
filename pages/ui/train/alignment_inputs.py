"""The Train form's alignment supervision (Garg et al. 2019): where a run's alignments come
from (a teacher model the app lists, eflomal run on the training pairs, or an aligner's
uploaded files), and what those inputs ask for."""

from __future__ import annotations

import streamlit as st

from core.runs.alignment_request import AlignmentChoice
from core.runs.budget import ALIGNMENT_FILE_BYTES, size_words
from core.runs.eflomal_program import EFLOMAL, eflomal_program, missing_line
from pages.ui.model_picker import model_entries
from pages.ui.train.launch_note import fold_key

ALIGN_FROM = {  # where an alignment-supervised run's alignments come from
    "none": "nothing (no supervision)",
    "teacher": "a model's best attention reader (teacher)",
    "eflomal": "eflomal, run on the training pairs (a statistical aligner as teacher)",
    "files": "an aligner's files (eflomal, fast_align, GIZA++)",
}


def alignment_inputs() -> None:
    """Alignment supervision (Garg et al. 2019): a teacher the app lists, or an aligner's
    uploaded files; the weight, layer and head are Advanced › Training settings."""
    with st.expander("Alignment supervision (optional)", key=fold_key("align")):
        st.caption(
            "Train one cross-attention head toward word alignments of the training pairs "
            "(Garg et al. 2019). Its weight, layer and head: align_weight (0 takes 0.05), "
            "align_layer and align_head under Advanced › Training (align_full_context: the "
            "head read with the whole target visible, as Garg et al. do)."
        )
        where = st.radio(
            "Alignments from", list(ALIGN_FROM), format_func=ALIGN_FROM.get, key="align_from"
        )
        if where == "teacher":
            teachers = [e.key for e in model_entries() if e.usable and e.path.endswith(".pt")]
            st.selectbox(
                "Teacher model",
                teachers,
                key="align_teacher",
                help="Its best reader on the shipped gold set aligns every training pair",
            )
        elif where == "eflomal":
            if eflomal_program() is None:
                st.warning(missing_line())  # our own words, with `code`
            else:
                st.caption(
                    "eflomal aligns the training pairs both ways, symmetrised with "
                    "grow-diag-final-and, before training starts (about 20 s for "
                    "fra-eng's 150,000 pairs; kept for the next run on the same pairs)."
                )
        elif where == "files":
            limit = size_words(ALIGNMENT_FILE_BYTES)
            st.file_uploader(
                f"Links, one Pharaoh line per pair (at most {limit})",
                type=["txt"],
                key="align_links_file",
            )
            st.file_uploader(
                f"The pairs they align, 'english ||| french' (at most {limit})",
                type=["txt"],
                key="align_pairs_file",
            )


def alignment_choice() -> AlignmentChoice | None:
    """What the alignment inputs ask for (None: no supervision)."""
    where = st.session_state.get("align_from", "none")
    if where == "teacher":
        return AlignmentChoice(teacher=st.session_state.get("align_teacher") or "")
    if where == "eflomal":
        return AlignmentChoice(teacher=EFLOMAL)
    if where == "files":
        files = [st.session_state.get(k) for k in ("align_links_file", "align_pairs_file")]
        links, pairs = (f.getvalue()[: ALIGNMENT_FILE_BYTES + 1] if f else b"" for f in files)
        return AlignmentChoice(links=links, pairs=pairs)
    return None
