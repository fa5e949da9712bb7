"""The runs table's widgets: filters, columns, notes and tags, settings chart, settings diff.

The rows come from ``core.runs.table`` (as ``python -m core.runs_table`` prints them), the
chart from ``core.figures.runs``, the diff from ``core.runs.config_diff``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import streamlit as st

from core.figures.runs import (
    DEFAULT_AXES,
    chart_rows,
    default_axes,
    runs_parcoords,
    varying_settings,
)
from core.runs import exports
from core.runs.config_diff import config_diff, diff_frame
from core.runs.notes import MAX_NOTE_CHARS, MAX_TAG_CHARS, MAX_TAGS, read_notes, write_notes
from core.runs.run_dir import RunError
from core.runs.status import FINAL_STATES, LIVE_STATES, RunInfo
from core.runs.table import (
    CORE_COLUMNS,
    RUN_COLUMNS,
    all_tags,
    column_help,
    filter_rows,
    more_columns,
    run_rows,
    runs_frame,
    setting_names,
)
from pages.ui.identity import current_user, not_yours
from pages.ui.text import md, spreadsheet_safe

STATES = (*LIVE_STATES, *FINAL_STATES, "unknown")  # every state a run can show
FORMATS = {  # number formats of the result columns
    "best BLEU": "%.2f",
    "final BLEU": "%.2f",
    "final loss": "%.3f",
    "val loss": "%.3f",
    "tokens": "localized",
    "elapsed (min)": "%.1f",
}


def column_config() -> dict:
    """How the runs table shows each column: formats, a progress bar, tags, help on hover."""
    config = {name: st.column_config.Column(help=text) for name, text in column_help().items()}
    for name, fmt in FORMATS.items():
        config[name] = st.column_config.NumberColumn(format=fmt, help=column_help().get(name))
    return config | {
        "progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0),
        "tags": st.column_config.ListColumn(),
        "note": st.column_config.TextColumn(width="large"),
    }


@dataclass(frozen=True)
class TableView:
    """What the user asked the runs table to show."""

    search: str = ""  # text in the run id, name, note or tags
    states: tuple[str, ...] = ()  # states kept (none: all)
    tags: tuple[str, ...] = ()  # a run with any of these is kept (none: all)
    columns: tuple[str, ...] = CORE_COLUMNS  # the columns shown, in order


def table_controls(runs: list[RunInfo]) -> TableView:
    """Search box, state and tag filters and the extra columns, above the table."""
    chosen_tags = st.session_state.get("runs_tags") or []
    tags = sorted({*all_tags(run_rows(runs)), *chosen_tags}, key=str.casefold)
    c1, c2, c3 = st.columns([2, 1, 1], vertical_alignment="bottom")
    search = c1.text_input(
        "Search runs",
        key="runs_search",
        placeholder="run id, name, note or tag",
        help="Keeps the runs whose id, name, note or tags contain this text (any case)",
    )
    states = c2.multiselect("State", STATES, key="runs_states", placeholder="any state")
    chosen = c3.multiselect("Tag", tags, key="runs_tags", placeholder="any tag")
    more = st.multiselect(
        "More columns",
        more_columns(),
        key="runs_more_columns",
        placeholder="every setting (group.field), preset, device",
        help="Click a column's title to sort by it",
    )
    return TableView(search, tuple(states), tuple(chosen), with_more(more))


def with_more(more: list[str]) -> tuple[str, ...]:
    """The columns in order: the run and its name, then the added ones (in view, not past the
    right edge of a wide table), then the rest of the default columns."""
    lead = CORE_COLUMNS[:2]  # run, name
    return (*lead, *more, *(c for c in CORE_COLUMNS[2:] if c not in more))


def runs_dataframe(
    runs: list[RunInfo], key: str, view: TableView | None = None, links: bool = False
) -> None:
    """The runs table (core.runs.table) as ``view`` filters it: sortable, a progress bar each;
    with ``links`` each run id opens that run on the Train page (Home's table)."""
    view = view or TableView()
    rows = run_rows(runs)
    kept = filter_rows(rows, view.search, view.states, view.tags)
    if len(kept) < len(rows):
        st.caption(f"{len(kept)} of {len(rows)} runs match the filters.")
    if not kept:
        return
    frame = runs_frame(kept, view.columns)
    shown, config = spreadsheet_safe(frame), column_config()
    if links and "run" in shown:
        shown["run"] = [f"train?run={quote(str(run), safe='')}" for run in frame["run"]]
        config["run"] = st.column_config.LinkColumn(
            "run", display_text=r"train\?run=(.*)", help="Open this run on the Train page"
        )
    st.dataframe(shown, hide_index=True, placeholder="—", key=key, column_config=config)
    st.download_button(
        "Runs table as CSV",
        lambda: exports.table_csv(frame),  # made on the click
        file_name="runs.csv",
        mime="text/csv",
        key=f"{key}_csv",
        help="The rows and columns shown, as a spreadsheet reads them (text never as a formula)",
    )


def settings_chart(runs: list[RunInfo], view: TableView) -> None:
    """Parallel coordinates of the filtered runs' settings against their final loss and BLEU."""
    rows = chart_rows(filter_rows(run_rows(runs), view.search, view.states, view.tags))
    st.subheader("Settings against results")
    if len(rows) < 2:
        st.caption(
            "Two runs with a validation BLEU are needed to draw their settings against "
            f"their results ({len(rows)} among the runs shown)."
        )
        return
    options = [n for n in (*RUN_COLUMNS, *setting_names()) if n != "train.probes"]
    varying, shown = varying_settings(rows), default_axes(rows)
    axes = st.multiselect(
        "Chart axes",
        options,
        default=shown,
        help="Settings drawn as axes (by default those that differ between the runs, at most "
        f"{DEFAULT_AXES}: the ones with the most distinct values); final loss, validation loss "
        "and final BLEU always follow. Drag on an axis to keep only the lines through a range.",
    )
    if len(varying) > len(shown):
        left = [n for n in varying if n not in shown]
        st.caption(
            md(
                f"{len(left)} more settings differ between these runs: "
                f"{', '.join(left)}. Add them above."
            )
        )
    st.plotly_chart(runs_parcoords(rows, axes), width="stretch", key="runs_parcoords")


def notes_form(info: RunInfo) -> None:
    """Edit the run's note and tags (kept in its own folder, notes.json)."""
    notes = read_notes(info.path)
    if not_yours(info.owner, f"run {info.run_id}"):
        if notes.note or notes.tags:
            with st.expander("Notes and tags"):
                st.markdown(md(notes.note) or "(no note)")
                st.caption("Tags: " + md(", ".join(notes.tags) or "none"))
        return
    with st.expander("Notes and tags"), st.form(f"notes-{info.run_id}"):
        note = st.text_area(
            "Note",
            value=notes.note,
            max_chars=MAX_NOTE_CHARS,
            placeholder="what this run tries, what you saw",
        )
        tags = st.text_input(
            "Tags of this run",
            value=", ".join(notes.tags),
            placeholder="baseline, 8 heads",
            help=f"Separated by commas; at most {MAX_TAGS} tags of {MAX_TAG_CHARS} characters",
        )
        if st.form_submit_button("Save notes"):
            try:
                write_notes(info.run_id, note, tags, user=current_user())
            except RunError as e:
                st.error(md(e))
                return
            st.rerun()


def settings_diff(runs: list[RunInfo], run_ids: list[str]) -> None:
    """The settings that differ between the compared runs, one column per run."""
    by_id = {r.run_id: r for r in runs}
    chosen = [by_id[i] for i in run_ids if i in by_id]
    if len(chosen) < 2:
        return
    rows = config_diff(chosen, {r.run_id: r.name or r.run_id for r in chosen})
    st.markdown("**Settings that differ**")
    if not rows:
        st.caption("The compared runs have the same settings.")
        return
    st.dataframe(spreadsheet_safe(diff_frame(rows)), hide_index=True, key="settings_diff")
