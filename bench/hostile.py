"""The load test's hostile session (``bench/load.py --hostile``, issues 31 and 49): one browser
trying every attack on a class server while the class works, and what it cost the others.

Round four (issue 49) adds: a client claiming the teacher by sending the identity header
itself, Patching and playback links with the longest prefix and reference a URL may carry,
UMAP of 1,000 sentences from a link and a damaged model folder beside the others. Since
round five (issue 64, ``bench/hostile_five.py``) the server is served as an operator may
serve it, ``uvicorn app:app --host 0.0.0.0`` with header identity and no proxy secret, and
the hostile session is a client from the network: it reaches the server at this machine's
own address, never signed in; the header is trusted only from loopback (the control). Round
four's two tabs of one user asking for heavy work became round five's nine sessions of one
client.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bench.students import TIMEOUT_MS, settled
from bench.wire import percentile
from tests.header_proxy import HeaderProxy

HOSTILE_RUN = "20260101-000000-hostile"  # a finished run whose model never ends its output
HEAVY_LIMIT_S = 30  # one heavy job's limit on the bench's server, short for the bench
IDENTITY = {  # users named by a proxy's header, no proxy secret (docs/serving.md)
    "ATTENTION_STUDIO_IDENTITY": "header:X-Forwarded-User",
    "ATTENTION_STUDIO_PROXY_SECRET": "",  # trusted only from a direct loopback connection
    "ATTENTION_STUDIO_TEACHERS": "teacher",
    "ATTENTION_STUDIO_HEAVY_LIMIT_S": str(HEAVY_LIMIT_S),
}
VIEWPORT = {"width": 1280, "height": 900}
HOSTILE_SETTINGS = {  # issue 31, item 1: 1.29 GB snapshots at every step
    "model": {"d_model": 64, "num_heads": 64, "num_encoder_layers": 24, "num_decoder_layers": 24},
    "train": {"eval_every": 1, "probes": ["!" * 200] * 8},
}


@dataclass(frozen=True)
class Target:
    """The class server as the hostile session reaches it."""

    url: str  # its loopback address, as the students (and the controls) reach it
    net: str  # this machine's own network address: the hostile session is a network client
    big: str | None = None  # an opus-mt-sized model's key (--opus-sized), opened by link attacks
    lm: str = ""  # a decoder-only model's key (round five's prompt-template attacks)


class Seen(list):
    """What the hostile session met, one (attempt, answer) per line; ``facts``: the figures
    the summary reads (round five's counts and waits)."""

    def __init__(self):
        super().__init__()
        self.facts: dict = {}


def never_ending_run(runs: Path, shipped: Path) -> None:
    """A finished run whose best.pt is an untrained model of the audit's shape (64 heads,
    24 + 24 layers) with the shipped vocabularies: it never emits <eos>."""
    import torch

    from core.model.checkpoints import save_checkpoint
    from core.model.config import ModelConfig
    from core.model.studio_loading import load_checkpoint
    from core.model.transformer import Transformer
    from core.runs.run_dir import RunDir, write_json

    lm = load_checkpoint(shipped)
    sizes = {k: v for k, v in HOSTILE_SETTINGS["model"].items()}
    cfg = ModelConfig(len(lm.src_vocab), len(lm.tgt_vocab), d_ff=64, dropout=0.0, **sizes)
    torch.manual_seed(0)
    rd = RunDir(runs / HOSTILE_RUN)
    rd.create()
    state = {"step": 1, "best_bleu": 0.0}
    save_checkpoint(rd.best, Transformer(cfg), lm.src_vocab, lm.tgt_vocab, state=state)
    rd.write_status(state="finished", message="")
    write_json(rd.job, {"run_id": HOSTILE_RUN, "created_at": 1.0, "launched_at": 0})


def damaged_folder(checkpoints: Path) -> None:
    """A model folder caught mid-copy: a config and an empty weights file (issue 49, item 5)."""
    folder = checkpoints / "half-copied"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "marian", "d_model": 512}))
    (folder / "model.safetensors").write_bytes(b"")


def gold_files(words: int, pairs: int = 2000) -> tuple[bytes, bytes]:
    """(pairs file, links file) of ``pairs`` sentences of ``words`` words each."""
    side = " ".join(["go"] * words)
    text = "".join(f"{side} ||| {side}\n" for _ in range(pairs)).encode()
    links = "".join(" ".join(f"{i}-{i}" for i in range(words)) + "\n" for _ in range(pairs))
    return text, links.encode()


async def hostile(browser, target: Target, until: float, seen: list) -> None:
    """Rounds three and four: what one browser from the network tried against everyone else,
    and what it met (``target.big``: an opus-mt-sized model's folder, opened by the link
    attacks too)."""
    from core.runs import jobs
    from core.runs.run_dir import RunError

    try:  # what the Train form's Launch does with these settings
        await asyncio.to_thread(jobs.start_run, "d2l", HOSTILE_SETTINGS)
        seen.append(("launch the 1.29 GB-snapshot settings", "started (NOT refused)"))
    except RunError as e:
        seen.append(("launch the 1.29 GB-snapshot settings", f"refused: {str(e)[:110]}"))
    await claim_teacher(browser, target, seen)
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    url, model = target.net, f"runs/{HOSTILE_RUN}/best.pt"
    rounds = 0
    while rounds == 0 or time.time() < until:  # every attack at least once
        rounds += 1
        for i in range(4):  # distinct links: each would have been a new cache entry
            sentence = " ".join(["go"] * (3 + (rounds * 4 + i) % 20)) + " ."
            query = urllib.parse.urlencode({"model": model, "max_len": 200, "sentence": sentence})
            await page.goto(f"{url}/translate?{query}", timeout=TIMEOUT_MS)
            await (
                page.get_by_text("was cut from 200")
                .or_(page.get_by_text("holds at most"))
                .first.wait_for(timeout=TIMEOUT_MS)
            )
            await settled(page)
        seen.append(("open ?max_len=200 links on the never-ending model", "cut or refused"))
        for attempt, args in (
            (upload_gold, (gold_files(100), seen, "2,000 pairs of 100 words")),
            (upload_gold, (gold_files(6), seen, "2,000 pairs of 6 words")),
            (overwrite_shipped, (seen,)),
            *((long_links, (seen, m)) for m in ("checkpoints/fra-eng-small.pt", target.big) if m),
            (umap_link, (seen,)),
        ):
            await attempted(seen, attempt, page, url, *args)
    await context.close()


async def attempted(seen: list, attempt, *args) -> None:
    """``await attempt(*args)``; an exception box met on the way is written down as
    "TRACEBACK", any other failure of the bench as itself, and the session goes on."""
    try:
        await attempt(*args)
    except Exception as e:  # noqa: BLE001 - the bench reports it and goes on
        line = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
        said = "TRACEBACK" if "exception on the page" in line else f"bench error: {line}"
        seen.append((attempt.__name__, said))


DRAWN_OR_SAID = (  # something a section shows once its script ran: a message, a chart, a button
    'document.querySelector(\'[data-testid="stAlert"], .js-plotly-plot, '
    '[data-testid="stException"], [data-testid="stMain"] button[kind="secondary"]\')'
)


async def shown(page) -> None:
    """Wait until the page drew its section (not only its frame), then until it is idle."""
    await page.wait_for_function(DRAWN_OR_SAID, timeout=TIMEOUT_MS)
    await settled(page)


async def alerts(page, prefer: str = "") -> str:
    """The page's messages (errors, warnings, notes) once it is idle, or what it drew; only
    the first line of the one holding ``prefer`` where one does."""
    await shown(page)
    found = [t.strip() for t in await page.locator('[data-testid="stAlert"]').all_inner_texts()]
    found = [t for t in found if t]
    if "Traceback" in await page.locator("body").inner_text():
        return "TRACEBACK"
    chosen = [t for t in found if prefer and prefer in t] or found
    text = " / ".join(t.splitlines()[0] for t in chosen)
    return text[:110] if text else "drawn, no message"


CLAIMS = (  # (what, the address the "proxy" dials, more headers it sends)
    ("claim the teacher from the network with X-Forwarded-User", "net", {}),
    (
        "claim the teacher from the network, also sending X-Forwarded-For: 127.0.0.1",
        "net",
        {"X-Forwarded-For": "127.0.0.1"},
    ),
    ("control: the same header from 127.0.0.1 (a proxy on this machine)", "127.0.0.1", {}),
)


async def claim_teacher(browser, target: Target, seen: list) -> None:
    """A client naming itself the teacher in the identity header: from the network (the
    attacks, ``tests.header_proxy`` dialling this machine's own address, since Chromium does
    not send extra headers on a websocket) and from loopback (the control: the header does
    reach the server and is trusted there)."""
    for what, via, more in CLAIMS:
        address = urllib.parse.urlsplit(target.net).hostname if via == "net" else via
        proxy = HeaderProxy(target.url, "X-Forwarded-User", "teacher", more, via=address)
        context = await browser.new_context()
        try:
            page = await context.new_page()
            await page.goto(proxy.url, timeout=TIMEOUT_MS)
            answer = page.get_by_text("Not signed in").or_(page.get_by_text("Signed in as"))
            await answer.first.wait_for(timeout=TIMEOUT_MS)
            text = await page.locator("body").inner_text()
            seen.append((what, "signed in as teacher" if "Teacher:" in text else "not signed in"))
        finally:
            await context.close()
            proxy.close()


async def long_links(page, url: str, seen: list, model: str) -> None:
    """Patching with the longest prefix a link may carry, playback with the longest
    reference (issue 49, item 2)."""
    letters = "qzxjkvbwpfmgyhdlcurontsiaequzxjkv"  # a word of 33 pieces or more on a subword model
    words = " ".join([letters] * 59)  # 59 words (the prefix's cap is 60), 2,005 characters
    words = words[: 1999 - 2 * 33] + " ."  # under the link's 2,000-character cap
    short = "opus" if "opus" in model else "shipped"
    for what, query in (
        (
            "patching, 1,999-character prefix",
            {"section": "patch", "patch_ask": 1, "patch_prefix": words},
        ),
        ("playback, 999-character reference", {"section": "playback", "reference": words[:999]}),
    ):
        base = {
            "model": model,
            "sentence": "the cat sits on the mat .",
            "corrupt": "the dog sits on the mat .",
        }
        await page.goto(
            f"{url}/attention?{urllib.parse.urlencode(base | query)}", timeout=TIMEOUT_MS
        )
        seen.append((f"{what} on the {short} model", await alerts(page)))


async def umap_link(page, url: str, seen: list) -> None:
    """UMAP of 1,000 sentences asked by a link alone (issue 49, item 6)."""
    query = {"section": "project", "space_method": "umap", "space_sentences": 1000}
    await page.goto(f"{url}/attention?{urllib.parse.urlencode(query)}", timeout=TIMEOUT_MS)
    button = page.get_by_role("button", name="Project 1000 sentences")
    await button.or_(page.locator(".js-plotly-plot")).first.wait_for(timeout=TIMEOUT_MS)
    await settled(page)
    drawn = await page.locator(".js-plotly-plot").count()
    verdict = "behind a button" if await button.count() and not drawn else "COMPUTED"
    seen.append(("UMAP of 1,000 sentences from a link", verdict))


GOLD_ANSWERS = (  # what the Alignment section says once it is done with an uploaded gold set
    "readers scored",
    "the server scores at most",
    "was not scored",
    "already have heavy work",
    "one runs at a time",
)


async def uploaded(page, url: str, files: tuple[bytes, bytes]) -> str:
    """The Alignment section's upload of a gold set; which of GOLD_ANSWERS the page gave
    ("TRACEBACK" for an exception box)."""
    query = urllib.parse.urlencode({"section": "alignment", "sentence": "go ."})
    await page.goto(f"{url}/attention?{query}", timeout=TIMEOUT_MS)
    await page.get_by_text("Upload", exact=True).click(timeout=TIMEOUT_MS)
    inputs = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    await inputs.nth(0).set_input_files(
        {"name": "pairs.txt", "mimeType": "text/plain", "buffer": files[0]}
    )
    await inputs.nth(1).set_input_files(
        {"name": "gold.txt", "mimeType": "text/plain", "buffer": files[1]}
    )
    return await first_answer(page, GOLD_ANSWERS, TIMEOUT_MS * 4)  # it may wait in line first


async def first_answer(page, answers: tuple[str, ...], timeout: float, more=None) -> str:
    """The first of ``answers`` the page shows, once it is idle (``more``: a locator that
    counts as an answer of its own, "drawn"); "TRACEBACK" for an exception box; "no answer"
    (with the page's messages) when none came within ``timeout`` ms."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    box = page.locator('[data-testid="stException"]')
    found = box if more is None else box.or_(more)
    for words in answers:
        found = found.or_(page.get_by_text(words))
    try:
        await found.first.wait_for(timeout=timeout)
    except PlaywrightTimeout:
        return f"no answer in {timeout / 1000:.0f} s: {await alerts(page)}"
    text = await page.locator("body").inner_text()
    if await box.count() or "Traceback" in text:
        return "TRACEBACK"
    await settled(page)
    text = await page.locator("body").inner_text()
    return next((a for a in answers if a in text), "drawn")


async def upload_gold(page, url: str, files: tuple[bytes, bytes], seen: list, what: str) -> None:
    """The Alignment section's upload of a gold set; what the page answered."""
    seen.append((f"upload a gold set of {what}", await uploaded(page, url, files)))


async def overwrite_shipped(page, url: str, seen: list) -> None:
    """Train page: "Save as a model" of the hostile run under the shipped model's name."""
    await page.goto(f"{url}/train?run={HOSTILE_RUN}", timeout=TIMEOUT_MS)
    await (
        page.get_by_text("Delete run")
        .or_(page.get_by_text("only its owner or a teacher"))
        .or_(page.get_by_text("can only look"))
        .or_(page.get_by_text("Save as a model"))
        .first.wait_for(timeout=TIMEOUT_MS)
    )
    await settled(page)
    if not await page.get_by_text("Save as a model").count():  # not the run's owner
        looks = await page.get_by_text("can only look").count()
        why = "not signed in" if looks else "not the run's owner"
        seen.append(("overwrite the shipped model", f"no Save button: {why}"))
        return
    await page.get_by_text("Save as a model").click(timeout=TIMEOUT_MS)
    await page.get_by_role("textbox", name="Model name").fill("fra-eng-small")
    await page.get_by_text("Replace a model with the same name").click()
    await page.get_by_role("button", name="Save model").click()
    answer = page.get_by_text("is the shipped model").or_(page.get_by_text("Saved as"))
    await answer.first.wait_for(timeout=TIMEOUT_MS)
    text = await page.locator("body").inner_text()
    seen.append(("overwrite the shipped model", "refused" if "shipped model" in text else "SAVED"))


def compare(
    phases: dict, seen: list, intact: bool, quota: int, goal_mb: int = 1536, more=None
) -> None:
    """What the hostile session met, and what it cost the others (JSON lines and a table);
    ``more``: round five's figures (``hostile_five.summary``)."""
    p95 = {
        phase: percentile([s for what, s, e in results if not e and what != "open a page"], 95)
        for phase, (results, *_) in phases.items()
    }
    errors = sum(1 for *_, e in phases["class + hostile"][0] if e)
    summary = {
        "ordinary_errors_with_hostile": errors,
        "p95_without_s": p95["class"],
        "p95_with_s": p95["class + hostile"],
        "p95_ratio": p95["class + hostile"] / p95["class"] if p95["class"] else None,
        "server_peak_rss_mb_with_hostile": round(phases["class + hostile"][1]),
        "server_peak_goal_mb": goal_mb,
        "server_peak_within_goal": phases["class + hostile"][1] < goal_mb,
        "teacher_claimed_by_a_header": any(
            w.startswith("claim the teacher") and a != "not signed in" for w, a in seen
        ),
        **(more or {}),
        "tracebacks_met": sum(1 for _, a in seen if a == "TRACEBACK"),
        "runs_folder_grew_mb": round(phases["class + hostile"][3] / 2**20, 1),
        "quota_gb": round(quota / 2**30, 1),
        "shipped_model_intact": intact,
    }
    print("\n## the hostile session")
    counts: dict = {}
    for what, answer in seen:
        counts[(what, answer)] = counts.get((what, answer), 0) + 1
    for (what, answer), n in counts.items():
        print(json.dumps({"hostile": what, "met": answer, "times": n}))
    print(json.dumps(summary))
