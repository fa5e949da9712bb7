"""Real browser (headless Chromium): the Train page's forms and uploader as only a browser
shows them (issue 69, items 2 and 3; issue 68, items 9 and 12).

Streamlit forms submit on Enter by default: typing 300 in "epochs" and pressing Enter
started a run, and Enter in a model's name saved it with no word on the page. Now Enter
sets the value and only the form's button acts. And a file the uploader's type list
refused got the browser's own "text/csv files are not allowed", which stayed after a new
pick: every file is taken and the page says in one line what is wrong with it.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from tests import helpers
from tests.helpers import (
    ARTIFACTS,
    assert_no_browser_exception,
    failure_shot,
    open_new_run,
    run_dirs,
)
from tests.test_browser_distributed import settle

FINISHED = "20260101-000000-d2l"  # a finished run copied in, to save as a model


@pytest.fixture(scope="module")
def enter_server(tmp_path_factory, tiny_run):
    """An app server of its own (its runs and models in temporary folders), over a finished
    tiny run."""
    root = tmp_path_factory.mktemp("enter-browser")
    runs, models = root / "runs", root / "checkpoints"
    runs.mkdir()
    models.mkdir()
    shutil.copytree(tiny_run, runs / FINISHED)
    env = {"ATTENTION_STUDIO_CHECKPOINTS": str(models), "ATTENTION_STUDIO_TRAINER_NICE": "0"}
    proc, url = helpers.start_server(runs, env=env)
    yield {"url": url, "runs": runs, "models": models}
    helpers.stop_server(proc)


def new_runs(runs, before: set[str]) -> list[str]:
    """Run directories that were not there ``before``."""
    return sorted(p.name for p in run_dirs(runs) if p.name not in before)


def test_enter_in_a_field_of_the_new_run_form_launches_nothing(
    enter_server, chromium, tiny_corpus, kill_trainers
):
    """Enter in "epochs" sets 300 and starts nothing; Launch then starts a run of 300."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(90_000)
    page = context.new_page()
    runs = enter_server["runs"]
    try:
        page.goto(enter_server["url"] + "/train")
        open_new_run(page)
        page.get_by_text("d2l chapter", exact=True).wait_for()
        settle(page)
        page.get_by_text("d2l chapter", exact=True).click()
        page.wait_for_url(re.compile(r"[?&]preset=d2l"))
        settle(page)
        page.get_by_text("file path", exact=True).click()
        path = page.get_by_label(re.compile("Path to a tab-separated file"))
        path.wait_for()
        settle(page)
        path.fill(str(tiny_corpus))
        path.press("Enter")  # a text box outside the form: Enter reads the file
        page.get_by_text("30 usable pairs, 0 skipped lines.").wait_for()
        settle(page)
        page.get_by_text("Advanced: every hyper-parameter").click()
        settle(page)
        before = {p.name for p in run_dirs(runs)}
        epochs = page.get_by_label("epochs", exact=True)
        epochs.fill("300")
        epochs.press("Enter")
        time.sleep(3)  # a submitted form would have made the run directory by now
        settle(page)
        assert new_runs(runs, before) == [], "Enter in a field launched a run"
        assert epochs.input_value() == "300"  # the value is set, not lost
        page.get_by_role("button", name="Launch training").click()
        page.wait_for_url(
            lambda url: (m := re.search(r"[?&]run=([^&]+)", url)) is not None and m[1] not in before
        )
        (launched,) = new_runs(runs, before)
        job = json.loads((runs / launched / "job.json").read_text())
        assert job["settings"]["train"]["epochs"] == 300  # what Enter set, Launch sent
        assert_no_browser_exception(page)
    except BaseException:
        failure_shot(page, "enter_new_run_failure")
        raise
    finally:
        kill_trainers(runs)
        context.close()


def test_new_run_opens_with_one_click_where_a_run_is_shown(enter_server, chromium):
    """Issue 69, item 3: with a run shown, "New run" was drawn open (its icon where the
    chevron says so) and the first click folded it. Now one click shows the form."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(90_000)
    page = context.new_page()
    try:
        page.goto(f"{enter_server['url']}/train?run={FINISHED}")
        page.get_by_text("Save as a model (checkpoints/)").wait_for()
        settle(page)
        page.locator("details > summary", has_text="New run").first.click()
        launch = page.get_by_role("button", name="Launch training")
        launch.wait_for(state="visible", timeout=15_000)  # one click: the form is there
        assert_no_browser_exception(page)
    except BaseException:
        failure_shot(page, "new_run_one_click_failure")
        raise
    finally:
        context.close()


def test_enter_in_the_model_name_saves_nothing_and_the_button_says_what_it_saved(
    enter_server, chromium
):
    """Enter in "Model name" saved the model with no word; the button then said only that
    the name exists. Now Enter saves nothing; the button saves and the page says so."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(90_000)
    page = context.new_page()
    models = enter_server["models"]
    try:
        page.goto(f"{enter_server['url']}/train?run={FINISHED}")
        page.get_by_text("Save as a model (checkpoints/)").wait_for()
        settle(page)
        page.get_by_text("Save as a model (checkpoints/)").click()
        name = page.get_by_role("textbox", name="Model name")
        name.fill("by-enter")
        name.press("Enter")
        time.sleep(3)  # a submitted form would have saved it by now
        settle(page)
        assert not (models / "by-enter.pt").exists(), "Enter saved the model"
        page.get_by_role("button", name="Save model").click()
        page.get_by_text("Saved as by-enter.pt").first.wait_for()
        assert (models / "by-enter.pt").is_file()
        assert page.get_by_text("already exists").count() == 0
        assert_no_browser_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "enter_saved_model.png"))
    except BaseException:
        failure_shot(page, "enter_save_failure")
        raise
    finally:
        context.close()


def test_a_csv_upload_is_told_what_is_wrong_and_a_new_pick_clears_it(
    enter_server, chromium, tmp_path
):
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(90_000)
    page = context.new_page()
    csv, good = tmp_path / "pairs.csv", tmp_path / "good.tsv"
    csv.write_text("english,french\nGo.,Va !\n")
    good.write_text("".join(f"I am {i}.\tJe suis {i}.\n" for i in range(200)))
    try:
        page.goto(enter_server["url"] + "/train")
        open_new_run(page)
        choice = page.get_by_role("radiogroup", name="Data").get_by_text("upload", exact=True)
        choice.wait_for()
        settle(page)
        choice.click()
        chooser = page.locator('[data-testid="stFileUploader"] input[type="file"]')
        chooser.wait_for(state="attached")
        settle(page)
        chooser.set_input_files(str(csv))
        page.get_by_text("pairs.csv has no TAB in it").wait_for()
        assert page.get_by_text("not allowed").count() == 0  # never the browser's refusal
        chooser.set_input_files(str(good))
        page.get_by_text("200 usable pairs, 0 skipped lines.").wait_for()
        settle(page)
        assert page.get_by_text("pairs.csv has no TAB in it").count() == 0
        assert page.get_by_text("not allowed").count() == 0
        assert_no_browser_exception(page)
    except BaseException:
        failure_shot(page, "upload_csv_failure")
        raise
    finally:
        context.close()
