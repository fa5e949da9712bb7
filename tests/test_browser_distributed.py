"""Real browser (headless Chromium): a run of two CPU processes launched and watched to its end.

The Train page's "processes" input (in "Advanced: every hyper-parameter") launches the run
with torchrun; the page must show it training, then finished, trained by 2 processes.

Each click waits for the app's script run it caused to end: a click that interrupts the
run which first draws a preset's form can leave that form showing (and submitting) widget
defaults (0, unchecked, empty) instead of the preset's values.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from core.runs import processes
from core.training.settings import merged_settings
from tests.helpers import ARTIFACTS, assert_no_browser_exception, open_new_run, wait_for
from tests.test_browser_train import LOSS_POINTS

PROCESSES = 2
MAX_STEPS = 80  # d2l logs every step: the loss curve ends at step 80 (long enough to watch)
LIMITS = {"train": {"epochs": 0, "max_steps": MAX_STEPS}}  # typed into the form
FINISH_S = 180.0  # launch to "finished" on a busy 2-core machine (it took 10-20 s here)
ENDED = ("failed", "stopped", "diverged", "unknown")  # states that mean the run went wrong
BADGE = "span.stMarkdownBadge"  # the run's state badge (st.badge)


IDLE = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return app !== null && app.dataset.testScriptState === 'notRunning';
}"""


def settle(page) -> None:
    """Wait until the app's script run has ended (its widgets are in the browser)."""
    page.wait_for_function(IDLE, timeout=60_000)


def processes_of(run: Path) -> list[int]:
    """Pids of live processes whose command line names the run directory (agent and ranks)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if str(run) in argv and state not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def log_tail(run: Path | None) -> str:
    """The last lines the trainer printed (for failure messages)."""
    log = run / "train.log" if run else None
    return log.read_text(errors="replace")[-3000:] if log and log.is_file() else "(no train.log)"


def watch_until_finished(page, run: Path) -> list[tuple[str, float]]:
    """Poll the page until its badge says "finished"; (badge, loss curve's last step) seen.

    Fails (with the trainer's log) on a state that means the run went wrong, or after FINISH_S.
    """
    badge = page.locator(BADGE).first
    seen: list[tuple[str, float]] = []
    deadline = time.time() + FINISH_S
    while time.time() < deadline:
        state = badge.text_content(timeout=30_000).strip()
        seen.append((state, page.evaluate(LOSS_POINTS)))
        if state == "finished":
            return seen
        if state in ENDED:
            pytest.fail(f"the run ended {state}: {log_tail(run)}")
        page.wait_for_timeout(500)  # the page itself polls the run every 5 s
    pytest.fail(f"not finished after {FINISH_S:.0f} s (seen {seen[-3:]}): {log_tail(run)}")


def test_two_processes_train_one_run_from_the_train_page(
    browser_page, app_server, tiny_corpus, kill_trainers
):
    page = browser_page
    run = None
    try:
        page.goto(app_server["url"] + "/train")
        open_new_run(page)
        page.get_by_text("d2l chapter", exact=True).wait_for(timeout=30_000)
        settle(page)
        page.get_by_text("d2l chapter", exact=True).click()
        page.wait_for_url(re.compile(r"[?&]preset=d2l"), timeout=30_000)
        settle(page)
        page.get_by_text("file path", exact=True).click()
        path = page.get_by_label(re.compile("Path to a tab-separated file"))
        path.wait_for(timeout=30_000)
        settle(page)
        path.fill(str(tiny_corpus))
        path.press("Enter")
        page.get_by_text("30 usable pairs, 0 skipped lines.").wait_for(timeout=30_000)
        settle(page)
        page.get_by_text("Advanced: every hyper-parameter").click()
        page.get_by_label("epochs", exact=True).fill("0")  # no epoch limit: max_steps ends it
        page.get_by_label("max steps", exact=True).fill(str(MAX_STEPS))
        page.get_by_label("processes", exact=True).fill(str(PROCESSES))
        before = {p.name for p in app_server["runs"].iterdir()}  # earlier tests' runs
        page.get_by_role("button", name="Launch training").click()

        page.wait_for_url(
            lambda url: (
                (m := re.search(r"[?&]run=(\d{8}-\d{6}-d2l)", url)) is not None
                and m[1] not in before
            ),
            timeout=30_000,
        )
        run_id = re.search(r"run=([^&]+)", page.url)[1]
        run = app_server["runs"] / run_id
        job = json.loads((run / "job.json").read_text())
        assert job["processes"] == PROCESSES, job
        launched, wanted = job["settings"], merged_settings("d2l", LIMITS)
        del launched["data"]["source"], wanted["data"]["source"]  # a copy inside the run
        assert launched == wanted  # the d2l preset and the two limits, nothing else changed

        runs_box = page.get_by_role("combobox", name="Run", exact=True)
        wait_for(lambda: run_id in runs_box.input_value(), 60, "the page to show the new run")
        settle(page)
        seen = watch_until_finished(page, run)
        assert seen[0][0] in ("starting", "running"), seen  # the page watched it live
        # the run's end reruns the page, which redraws the curves with the last record
        page.wait_for_function(f"({LOSS_POINTS})() >= {MAX_STEPS}", timeout=60_000)
        curve = [step for _, step in seen] + [page.evaluate(LOSS_POINTS)]
        assert curve == sorted(curve), seen  # the curve only ever grew
        assert curve[0] < MAX_STEPS == curve[-1], seen  # and it grew while the page watched

        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "finished", status
        assert status["step"] == MAX_STEPS, status
        assert status["world_size"] == PROCESSES, status
        assert len(status["devices"]) == PROCESSES, status
        assert f"× {PROCESSES} processes" in status["device"], status
        page.get_by_text(f"× {PROCESSES} processes").first.wait_for(timeout=10_000)
        # .first: while the page reruns, the live bar (with its ETA) may sit beside the final one
        page.get_by_text(f"step {MAX_STEPS} of {MAX_STEPS}").first.wait_for(timeout=10_000)
        assert page.locator(BADGE).first.text_content().strip() == "finished"
        assert_no_browser_exception(page)

        # one process (rank 0) wrote the metrics: one file, each step once, in order
        assert sorted(run.rglob("metrics*.jsonl")) == [run / "metrics.jsonl"]
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [r["step"] for r in records if r.get("record") == "train"]
        assert all(a < b for a, b in zip(steps, steps[1:])), steps
        assert steps == list(range(1, MAX_STEPS + 1)), steps  # log_every 1

        # torchrun's agent and both ranks have exited
        wait_for(  # the torchrun agent exits a moment after its workers
            lambda: processes.check_trainer(job["pid"], run, job["identity"]) is not True,
            60,
            "the torchrun agent to exit",
        )
        wait_for(lambda: not processes_of(run), 60, "the trainer processes to exit")

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator(BADGE).first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "train_page_distributed.png"), full_page=True)
    except BaseException:  # pytest.fail raises a BaseException
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train_page_distributed_failure.png"), full_page=True)
        raise
    finally:
        kill_trainers(app_server["runs"])
