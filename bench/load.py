"""The class-room load test: one app served to a class while a training run goes on.

A Streamlit server on this machine's loopback; one training run launched through the app's
job launcher (``core.runs.jobs``); then ``--sessions`` headless Chromium sessions at once,
for ``--seconds``, each doing what a student does: half open the Translate page and type
one sentence after another; half open the Attention page's "Remove heads" section, switch
the attention kind (browse heads) and remove one more head at a time. Every interaction is
timed from the click or the Enter key to the page showing its result (the new translation,
the new maps) with Streamlit's rerun finished; opening a page is timed on its own.
It prints JSON lines and a table:
errors (goal 0), p50/p95 latency per interaction, the server's peak memory, the trainer's
tokens/s alone and under the load (medians of its metric records), and the cores the
server, the trainer and the browsers each used on average while the class worked.

The browsers run on the same cores as the server and the trainer, which in a class they do
not. Two phases (``--browsers both``, the default): "class", the browsers' session at the
same priority as the others; then "class, browsers at the lowest priority" (their session's
niceness 19: Linux shares the CPU between sessions first, so a process's own niceness
would not do), where the server and the trainer get the cores as if the browsers ran on the
students' machines and the browsers take what is left. ``--browsers none``: the same
students without a browser, speaking Streamlit's protocol (``bench/wire.py``), so each
interaction is the server's answer alone; then one Chromium session alone (the class over,
the trainer still running: a student's own machine), whose drawing added to the server's
p95 under the class estimates a student's wait; ``all``: the four phases in turn (the later
ones find the server warm).

With ``--hostile`` the class works twice, the second time beside a hostile session (issue
31): it launches the settings whose snapshots once reached 1.29 GB each, opens
``?max_len=200`` links on a model that never ends its output (64 heads, 24 + 24 layers),
uploads a 2,000-pair gold file of 100-word sentences and then a 2,000-pair short one, and
tries to overwrite the shipped model; round four's attacks (issue 49, ``bench/hostile.py``:
a teacher claimed by a header, the longest Patching and playback links, UMAP from a link, a
damaged model folder); and first round five's (issue 64, ``bench/hostile_five.py``: the
metrics route, nine sessions of one client asking for heavy work beside a victim of another,
Readers beyond one head on a large gold set, Alignment links and a long template on a
decoder-only model, weights cut short, malformed attribution results). The server is then
served as an operator may serve it, ``uvicorn app:app --host 0.0.0.0``, knowing its users
from a proxy's header without a proxy secret; the students reach it on 127.0.0.1, the
hostile session from the network (this machine's own address), and the students work on
until it has made every attempt. It reports what each attempt met, the ordinary sessions'
p95 with it against without it, the server's peak memory in each phase against its goal
(1.5 GB; 2 GB with ``--opus-sized``, where an opus-mt-sized model sits in checkpoints/ and
the link attacks open it too, and the decoder-only model is GPT-2-sized) and how much the
runs folder grew, against the quota.

    python bench/load.py [--sessions 10] [--seconds 120] [--alone 60] [--draw 120]
        [--browsers both|equal|lowest|none|all] [--hostile [--opus-sized]]

Needs Debian's Chromium and the fra-eng corpus (``$FRA_ENG_ZIP`` or ../shared); every
address it talks to is 127.0.0.1 (with ``--hostile``, this machine's own address too), and it
stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import wire  # noqa: E402
from bench.common import corpus_path  # noqa: E402
from bench.hostile import (  # noqa: E402
    IDENTITY,
    Seen,
    Target,
    compare,
    damaged_folder,
    never_ending_run,
)
from bench.hostile_five import round_five_folders, session, summary  # noqa: E402
from bench.students import (  # noqa: E402
    CHROMIUM,
    HEADS,
    KIND_WORDS,
    SENTENCES,
    TIMEOUT_MS,
    one_browser,
    student,
)
from bench.wire import percentile  # noqa: E402
from tests.helpers import own_address, start_server, stop_server  # noqa: E402  (the tests' server)

BROWSER_GROUP = {"nice": "0"}  # the niceness of the browsers' session in this phase
LOWEST = "class, browsers at the lowest priority"  # the phase as if on the students' machines
WIRE = "class, students without a browser"  # the server's answers alone (bench/wire.py)
DRAWN = "one browser, the class over"  # a student's own machine drawing the answers


def own_cpu_seconds() -> float:
    """CPU seconds this process has used (the WIRE phase's students are its own)."""
    t = os.times()
    return t.user + t.system


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used, all its threads (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class PeakMemory(threading.Thread):
    """Samples a process's resident memory every 0.2 s (``peak`` in MB) and the CPU seconds
    of the browsers' processes (``browsers``: pid -> seconds, the last seen of each)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()
        self.browsers: dict[int, float] = {}

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            for pid in renice_browsers():
                self.browsers[pid] = max(self.browsers.get(pid, 0.0), cpu_seconds(pid))
            time.sleep(0.2)


def browser_pids() -> list[int]:
    """The Chromium processes this process started (its descendants named chrom*)."""
    mine, found = os.getpid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if b"chrom" not in (entry / "cmdline").read_bytes()[:200]:
                continue
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if _descends(int(entry.name), mine, parent):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def renice_browsers() -> list[int]:
    """Chromium's processes at the lowest priority: in a class they run on the students'
    machines, so here they take only what the server and the trainer leave. Where Linux
    groups processes by session (autogroup), their session's niceness is set too: a
    process's own niceness counts only inside its session, and Chromium's renderers had
    weighed as much as the server and the trainer each."""
    found = browser_pids()
    for pid in found:
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < 19:
                os.setpriority(os.PRIO_PROCESS, pid, 19)
                with contextlib.suppress(OSError):
                    Path(f"/proc/{pid}/autogroup").write_text(BROWSER_GROUP["nice"])
        except OSError:
            continue
    return found


def _descends(pid: int, ancestor: int, parent: int) -> bool:
    """Whether ``pid`` (whose parent is ``parent``) descends from ``ancestor``."""
    for _ in range(8):
        if parent == ancestor:
            return True
        if parent <= 1:
            return False
        try:
            parent = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


class Until(float):
    """The students' deadline (they compare ``time.time() < until``), not past while ``busy``:
    beside the hostile session the class works on until it has made every attempt. Python
    asks a float subclass on the right of ``<`` first, through its ``__gt__``."""

    busy = False

    def __gt__(self, now) -> bool:
        return self.busy or float(self) > now


async def the_class(
    url: str,
    sessions: int,
    seconds: float,
    seed: int,
    seen: list | None = None,
    wired=False,
    target: Target | None = None,
) -> list:
    """``sessions`` students at once in one headless Chromium for ``seconds`` (and the hostile
    session beside them when ``seen`` is a list: what it met goes there; they work on until it
    is done); ``wired``: the same students without a browser (``bench/wire.py``)."""
    from playwright.async_api import async_playwright

    results: list = []
    if wired:
        until = time.time() + seconds
        args = (SENTENCES, KIND_WORDS, HEADS, TIMEOUT_MS / 1000)
        work = [wire.student(url, seed + i, until, results, *args) for i in range(sessions)]
        await asyncio.gather(*work)
        return results
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        until = Until(time.time() + seconds)
        until.busy = seen is not None

        async def hostile_session():
            """The hostile session; the class stops once it is done (and ``seconds`` passed)."""
            try:
                await session(browser, target, float(until), seen)
            finally:
                until.busy = False

        work = [student(browser, url, seed + i, until, results) for i in range(sessions)]
        work += [hostile_session()] if seen is not None else []
        await asyncio.gather(*work)
        await browser.close()
    return results


def student_wait(server: list, drawn: list) -> list[dict]:
    """A student's wait on their own machine, estimated per interaction: the server's p95
    answer under the class (students without a browser) plus the p95 of one browser's whole
    interaction with the class over (its own, quiet, server answer is counted twice: an
    upper estimate)."""
    rows = []
    for what in ("open a page", "translate", "browse heads", "remove heads"):
        answer = percentile([s for w, s, e in server if w == what and not e], 95)
        drawing = percentile([s for w, s, e in drawn if w == what and not e], 95)
        both = answer is not None and drawing is not None
        rows.append(
            {
                "interaction": what,
                "server_p95_s": answer,
                "one_browser_p95_s": drawing,
                "student_wait_p95_s": answer + drawing if both else None,
            }
        )
    return rows


def report_wait(rows: list[dict]) -> None:
    """The estimate of a student's wait as JSON lines and a table."""
    print("\n## a student's wait on their own machine (estimate)")
    for row in rows:
        print(json.dumps({"estimate": "student_wait", **row}))
    print("\n| interaction | server p95 s (the class) | one browser p95 s | wait p95 s |")
    print("|---|---|---|---|")
    keys = ("server_p95_s", "one_browser_p95_s", "student_wait_p95_s")
    for r in rows:
        cells = [f"{r[k]:.2f}" if r[k] is not None else "—" for k in keys]
        print(f"| {r['interaction']} | {' | '.join(cells)} |")


def train_records(runs: Path, run_id: str) -> list[dict]:
    """The run's training records so far."""
    path = runs / run_id / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [r for r in map(json.loads, lines) if r.get("record") == "train"]


def median_tokens_per_s(records: list[dict]) -> float | None:
    """Median tokens/s of some training records."""
    values = [r["tokens_per_s"] for r in records if r.get("tokens_per_s")]
    return statistics.median(values) if values else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--seconds", type=float, default=120.0, help="how long the class works")
    p.add_argument("--alone", type=float, default=60.0, help="trainer measured alone first")
    p.add_argument(
        "--draw", type=float, default=120.0, help="one browser alone after --browsers none"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hostile", action="store_true", help="then again beside a hostile session")
    p.add_argument(
        "--opus-sized",
        action="store_true",
        help="with --hostile: an opus-mt-sized model (random weights) in checkpoints/, opened "
        "by the hostile session's links",
    )
    p.add_argument(
        "--browsers",
        choices=("equal", "lowest", "none", "both", "all"),
        default="both",
        help="the browsers' priority: equal to the server's and the trainer's, the lowest "
        "(as if on the students' machines), none (students speak Streamlit's protocol "
        "without a browser: the server's answers alone; then one browser alone, for a "
        "student's wait), both (equal and lowest) or all",
    )
    args = p.parse_args()
    if args.hostile and own_address() is None:
        p.error("--hostile needs an address of this machine besides loopback")
    tmp = Path(tempfile.mkdtemp(prefix="load-"))
    env = {**os.environ, "ATTENTION_STUDIO_RUNS": str(tmp / "runs")}
    env["FRA_ENG_ZIP"] = corpus_path()
    env["ATTENTION_STUDIO_CHECKPOINTS"] = str(tmp / "checkpoints")  # the shipped model's copy
    (tmp / "runs").mkdir()
    shutil.copytree(ROOT / "checkpoints", tmp / "checkpoints")
    os.environ.update(env)
    from core.runs import jobs, quota
    from core.runs.run_dir import RunError
    from core.runs.status import run_info

    run_id = jobs.start_run(
        "small", {"train": {"device": "cpu", "time_budget": 0, "max_steps": 10**6, "log_every": 10}}
    )
    lm, big = hostile_folders(tmp, args.opus_sized) if args.hostile else (None, None)
    host = "0.0.0.0" if args.hostile else None  # as an operator may serve it: every interface
    server, url = start_server(
        tmp / "runs", env=IDENTITY if args.hostile else None, uvicorn_host=host
    )
    target = None
    if args.hostile:  # the hostile session is a client from the network: this machine's address
        target = Target(url, f"http://{own_address()}:{url.rsplit(':', 1)[1]}", big, lm)
    memory = PeakMemory(server.pid)
    memory.start()
    phases, seen = {}, Seen()
    try:
        time.sleep(20)  # the trainer reads the corpus and starts
        first = len(train_records(tmp / "runs", run_id))
        time.sleep(args.alone)
        before = train_records(tmp / "runs", run_id)
        alone = median_tokens_per_s(before[first:])
        trainer = run_info(run_id).pid or 0
        for phase in phases_of(args):
            BROWSER_GROUP["nice"] = "19" if phase == LOWEST else "0"
            memory.peak, held = 0.0, quota.folder_bytes(tmp / "runs")
            mark = len(train_records(tmp / "runs", run_id))
            hostile_seen = seen if phase == "class + hostile" else None
            memory.browsers.clear()
            cpu = (cpu_seconds(server.pid), cpu_seconds(trainer), time.perf_counter())
            mine = own_cpu_seconds()
            if phase == DRAWN:
                results = asyncio.run(one_browser(url, args.draw, args.seed))
            else:
                work = (args.sessions, args.seconds, args.seed, hostile_seen, phase == WIRE, target)
                results = asyncio.run(the_class(url, *work))
            wall = time.perf_counter() - cpu[2]
            used = {  # cores each part used on average during the class
                "server_cores": (cpu_seconds(server.pid) - cpu[0]) / wall,
                "trainer_cores": (cpu_seconds(trainer) - cpu[1]) / wall,
                "browsers_cores": sum(memory.browsers.values()) / wall,
            }
            if phase == WIRE:  # the students are this process's websockets
                used["students_cores"] = (own_cpu_seconds() - mine) / wall
            if phase == DRAWN:  # what drawing one answer costs a student's machine
                drawn = sum(memory.browsers.values()) / max(1, len(results))
                used["browser_cpu_s_per_interaction"] = drawn
            loaded = median_tokens_per_s(train_records(tmp / "runs", run_id)[mark:])
            grew = quota.folder_bytes(tmp / "runs") - held
            phases[phase] = (results, memory.peak, loaded, grew, used)
        shipped = (tmp / "checkpoints" / "fra-eng-small.pt").read_bytes()
        intact = shipped == (ROOT / "checkpoints" / "fra-eng-small.pt").read_bytes()
        limit = quota.quota_bytes(quota.folder_bytes(tmp / "runs"))
    finally:
        memory.done.set()
        with contextlib.suppress(RunError):  # a trainer that failed says so in its log
            jobs.stop_run(run_id, wait=30)
        stop_server(server)
        shutil.rmtree(tmp, ignore_errors=True)  # the run, the model's copy, the server's log
    for phase, (results, peak, loaded, grew, used) in phases.items():
        print(f"\n## {phase}")
        more = {"runs_folder_grew_mb": grew / 2**20, **{k: round(v, 2) for k, v in used.items()}}
        report(results, peak, alone, loaded, args, more)
    if WIRE in phases and DRAWN in phases:
        report_wait(student_wait(phases[WIRE][0], phases[DRAWN][0]))
    if args.hostile:
        compare(phases, seen, intact, limit, 2048 if args.opus_sized else 1536, summary(seen))
    return 0


def hostile_folders(tmp: Path, opus_sized: bool) -> tuple[str, str | None]:
    """The hostile session's runs and model folders in the bench's copies (a never-ending
    model, a half-copied folder, round five's decoder-only and cut-short folders, with
    ``opus_sized`` an opus-mt-sized model): (the decoder-only model's key, the opus-mt-sized
    one's or None)."""
    never_ending_run(tmp / "runs", tmp / "checkpoints" / "fra-eng-small.pt")
    damaged_folder(tmp / "checkpoints")
    lm = round_five_folders(tmp / "checkpoints", opus_sized)
    if not opus_sized:
        return lm, None
    sys.path.insert(0, str(ROOT / "bench"))
    import hf_speed

    hf_speed.build(tmp / "checkpoints" / "opus-mt-en-fr-random")
    return lm, "checkpoints/opus-mt-en-fr-random/"


def phases_of(args) -> tuple[str, ...]:
    """The phases this run measures: the class with its browsers sharing the cores equally
    with the server and the trainer; and/or with them at the lowest priority (their session's
    niceness 19), so that the server and the trainer get the cores as in a class whose
    browsers run elsewhere; and/or the class without browsers, then one browser alone; with
    --hostile, the class and then the class beside it."""
    if args.hostile:
        return ("class", "class + hostile")
    return {
        "equal": ("class",),
        "lowest": (LOWEST,),
        "none": (WIRE, DRAWN),
        "both": ("class", LOWEST),
        "all": ("class", LOWEST, WIRE, DRAWN),
    }[args.browsers]


def report(results: list, peak: float, alone, loaded, args, more: dict | None = None) -> None:
    """JSON lines per interaction kind and overall, then a Markdown table."""
    rows = []
    again = ["open a page again"] if any(r[0] == "open a page again" for r in results) else []
    for what in ["open a page", *again, "translate", "browse heads", "remove heads", "all"]:
        chosen = [r for r in results if what in ("all", r[0])]
        times = [s for _, s, e in chosen if not e]
        rows.append(
            {
                "interaction": what,
                "count": len(chosen),
                "errors": sum(1 for *_, e in chosen if e),
                "p50_s": percentile(times, 50),
                "p95_s": percentile(times, 95),
            }
        )
    summary = {
        "sessions": args.sessions,
        "seconds": args.seconds,
        "server_peak_rss_mb": round(peak),
        "trainer_tokens_per_s_alone": alone,
        "trainer_tokens_per_s_under_load": loaded,
        "trainer_ratio": loaded / alone if alone and loaded else None,
        "error_examples": sorted({e for *_, e in results if e})[:5],
        **(more or {}),
    }
    for row in rows + [summary]:
        print(json.dumps(row))
    print("\n| interaction | count | errors | p50 s | p95 s |\n|---|---|---|---|---|")
    for r in rows:
        fmt = [f"{r[k]:.2f}" if r[k] is not None else "—" for k in ("p50_s", "p95_s")]
        print(f"| {r['interaction']} | {r['count']} | {r['errors']} | {fmt[0]} | {fmt[1]} |")


if __name__ == "__main__":
    raise SystemExit(main())
