"""AppTest of what the Train page shows right after Launch (issue #21, item 4): the form and
its "Advanced" folded up, a note on the new run right under them, what the run is doing."""

from __future__ import annotations

from core.places import runs_root
from core.runs import capacity, jobs
from tests.helpers import TINY_PRESET, assert_clean, plain
from tests.test_app_train import button, fill_tiny_form, train_page


def expanders(at) -> dict[str, bool]:
    """label -> whether the expander is drawn open."""
    return {e.label: e.proto.expanded for e in at.expander}


def launched_notes(at) -> list[str]:
    """The success boxes that name a launched run."""
    return [plain(s.value) for s in at.success if "Launched run" in s.value]


def test_launch_folds_the_form_and_names_the_new_run_below_it(jobs_env, make_run, monkeypatch):
    def start_run(preset, chosen, processes, user=None, alignment=None):
        make_run(runs_root(), "fresh-run", {}, job={"processes": processes, "preset": preset})
        return "fresh-run"

    monkeypatch.setattr(capacity, "max_processes", lambda device_type: 2)
    monkeypatch.setattr(jobs, "start_run", start_run)
    at = train_page()
    assert expanders(at)["New run"] is True and not launched_notes(at)
    fill_tiny_form(at)
    at.number_input(key="processes").set_value(2)
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert at.query_params["run"] == "fresh-run"
    shown = expanders(at)
    assert shown["New run"] is False and shown["Advanced: every hyper-parameter"] is False
    (note,) = launched_notes(at)
    assert "Launched run **fresh-run**" in note and f"({TINY_PRESET} ·" in note, note
    assert "starting 2 processes" in note, note
    scripts = [h.proto.body for h in at.get("html") if "scrollIntoView" in h.proto.body]
    assert len(scripts) == 1 and ".st-key-launched" in scripts[0]
    at.run()  # any later run of the page: the note is gone, the form stays folded
    assert not launched_notes(at) and expanders(at)["New run"] is False


def test_a_refused_launch_keeps_the_form_open(jobs_env):
    at = train_page()
    fill_tiny_form(at, **{"model.num_heads": 3})
    button(at, "Launch training").click().run()
    assert at.error and not launched_notes(at)
    assert expanders(at)["New run"] is True
