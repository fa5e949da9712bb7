"""The load test's hostile session (``bench/load.py --hostile``, issue 31): one browser trying
every attack on a class server while the class works, and what it cost the others.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from pathlib import Path

from bench.students import TIMEOUT_MS, settled
from bench.wire import percentile

HOSTILE_RUN = "20260101-000000-hostile"  # a finished run whose model never ends its output
HOSTILE_SETTINGS = {  # issue 31, item 1: 1.29 GB snapshots at every step
    "model": {"d_model": 64, "num_heads": 64, "num_encoder_layers": 24, "num_decoder_layers": 24},
    "train": {"eval_every": 1, "probes": ["!" * 200] * 8},
}


def never_ending_run(runs: Path, shipped: Path) -> None:
    """A finished run whose best.pt is an untrained model of the audit's shape (64 heads,
    24 + 24 layers) with the shipped vocabularies: it never emits <eos>."""
    import torch

    from core.model.checkpoints import load_checkpoint, save_checkpoint
    from core.model.config import ModelConfig
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


def gold_files(words: int, pairs: int = 2000) -> tuple[bytes, bytes]:
    """(pairs file, links file) of ``pairs`` sentences of ``words`` words each."""
    side = " ".join(["go"] * words)
    text = "".join(f"{side} ||| {side}\n" for _ in range(pairs)).encode()
    links = "".join(" ".join(f"{i}-{i}" for i in range(words)) + "\n" for _ in range(pairs))
    return text, links.encode()


async def hostile(browser, url: str, until: float, seen: list) -> None:
    """The hostile session: what one browser tried against everyone else, and what it met."""
    from core.runs import jobs
    from core.runs.run_dir import RunError

    try:  # what the Train form's Launch does with these settings
        await asyncio.to_thread(jobs.start_run, "d2l", HOSTILE_SETTINGS)
        seen.append(("launch the 1.29 GB-snapshot settings", "started (NOT refused)"))
    except RunError as e:
        seen.append(("launch the 1.29 GB-snapshot settings", f"refused: {str(e)[:110]}"))
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    model = f"runs/{HOSTILE_RUN}/best.pt"
    rounds = 0
    while time.time() < until:
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
        ):
            try:
                await attempt(page, url, *args)
            except Exception as e:  # noqa: BLE001 - the bench reports it and goes on
                seen.append((attempt.__name__, f"bench error: {str(e).splitlines()[0][:100]}"))
    await context.close()


async def upload_gold(page, url: str, files: tuple[bytes, bytes], seen: list, what: str) -> None:
    """The Alignment section's upload of a gold set; what the page answered."""
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
    answers = ["readers scored", "the server scores at most", "one runs at a time"]
    found = page.get_by_text(answers[0])
    for words in answers[1:]:
        found = found.or_(page.get_by_text(words))
    await found.first.wait_for(timeout=TIMEOUT_MS)
    await settled(page)
    text = await page.locator("body").inner_text()
    answer = next((a for a in answers if a in text), "?")
    seen.append((f"upload a gold set of {what}", answer))


async def overwrite_shipped(page, url: str, seen: list) -> None:
    """Train page: "Save as a model" of the hostile run under the shipped model's name."""
    await page.goto(f"{url}/train?run={HOSTILE_RUN}", timeout=TIMEOUT_MS)
    await page.get_by_text("Save as a model").click(timeout=TIMEOUT_MS)
    await page.get_by_role("textbox", name="Model name").fill("fra-eng-small")
    await page.get_by_text("Replace a model with the same name").click()
    await page.get_by_role("button", name="Save model").click()
    answer = page.get_by_text("is the shipped model").or_(page.get_by_text("Saved as"))
    await answer.first.wait_for(timeout=TIMEOUT_MS)
    text = await page.locator("body").inner_text()
    seen.append(("overwrite the shipped model", "refused" if "shipped model" in text else "SAVED"))


def compare(phases: dict, seen: list, intact: bool, quota: int) -> None:
    """What the hostile session met, and what it cost the others (JSON lines and a table)."""
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
