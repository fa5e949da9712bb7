"""The load test's students in a browser (``bench/load.py``): half type one sentence after
another on the Translate page; half switch the attention kind and remove one more head at a
time on the Attention page's "Remove heads" section. Each interaction is timed (``wire.timed``)
from the click or the Enter key to the page showing its result with Streamlit's rerun
finished; an exception on the page is an error. ``bench/wire.py``: the same students without
a browser.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import urllib.parse

from bench import wire

SENTENCES = ["i'm home .", "he's calm .", "i lost .", "go .", "we are cold .", "she is here ."]
CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 120_000  # an interaction slower than this counts as an error
STUCK_DIR = os.environ.get("BENCH_STUCK_DIR", "")  # screenshots of stuck students, if set


KIND_WORDS = {
    "Encoder self": "Encoder self-attention",
    "Decoder self": "Decoder self-attention",
    "Cross": "Cross attention",
}  # radio label -> the large map's title
HEADS = [f"Cross L{layer} H{head}" for layer in range(2) for head in range(4)]  # shipped model


async def settled(page) -> None:
    """Wait for the rerun to end (Streamlit's running indicator gone), then check for errors."""
    await page.wait_for_function(
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=TIMEOUT_MS
    )
    if await page.locator('[data-testid="stException"]').count():
        raise RuntimeError("exception on the page")


async def translator(page, url: str, rng: random.Random, until: float, results: list):
    """A student on the Translate page: opens it, then types one sentence after another."""

    async def open_page():
        await page.goto(f"{url}/translate", wait_until="domcontentloaded", timeout=TIMEOUT_MS)
        await page.locator("h3").nth(1).wait_for(state="visible", timeout=TIMEOUT_MS)
        await settled(page)

    await wire.timed(results, "open a page", open_page)
    sentence = SENTENCES[0]  # the page's default sentence
    while time.time() < until:
        old = await page.locator("h3").nth(1).inner_text()  # the first says "Translation"
        sentence = rng.choice([s for s in SENTENCES if s != sentence])  # a new translation

        async def translate(sentence=sentence, old=old):
            box = page.locator('[data-testid="stTextInput"] input').first
            await box.fill(sentence)
            await box.press("Enter")
            await page.wait_for_function(
                "old => (document.querySelectorAll('h3')[1] || {}).innerText !== old",
                arg=old,
                timeout=TIMEOUT_MS,
            )
            await settled(page)

        await wire.timed(results, "translate", translate)
        await asyncio.sleep(rng.uniform(0.5, 2.0))  # reading what came back


async def explorer(page, url: str, rng: random.Random, until: float, results: list):
    """A student on the Attention page's "Remove heads" section: switches the attention kind
    (browse heads) and removes one more cross-attention head at a time (remove heads)."""
    sentence = rng.choice(SENTENCES)

    async def open_page():
        query = urllib.parse.urlencode({"sentence": sentence, "section": "ablation"})
        await page.goto(
            f"{url}/attention?{query}", wait_until="domcontentloaded", timeout=TIMEOUT_MS
        )
        await page.locator('[data-testid="stMultiSelect"] input').first.wait_for(timeout=TIMEOUT_MS)
        await settled(page)

    await wire.timed(results, "open a page", open_page)
    kind, removed = "Cross", 0
    while time.time() < until:
        if removed and (rng.random() < 0.5 or removed >= len(HEADS)):  # maps once one is out
            kind = rng.choice([k for k in KIND_WORDS if k != kind])

            async def browse(kind=kind):
                radio = page.locator('[data-testid="stRadio"]').filter(has_text="Attention kind")
                await radio.get_by_text(kind, exact=True).first.click()
                await page.wait_for_function(
                    "title => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
                    ".some(t => t.textContent.startsWith(title))",  # the large map, not a role map
                    arg=KIND_WORDS[kind],
                    timeout=TIMEOUT_MS,
                )
                await settled(page)

            await wire.timed(results, "browse heads", browse)
        else:
            removed += 1

            async def remove(removed=removed):
                box = page.locator('[data-testid="stMultiSelect"] input').first
                # in view first, as a student scrolls: with seven heads chosen the box's second
                # row sits at a 900 px window's bottom edge, and its menu does not open there
                await box.evaluate("e => e.scrollIntoView({block: 'center'})")
                await box.click()
                await box.fill(HEADS[removed - 1])
                await box.press("Enter")
                await box.press("Escape")
                what = f"{removed} head{'s' * (removed != 1)} removed"
                try:
                    await page.get_by_text(what).first.wait_for(timeout=TIMEOUT_MS)
                except Exception:  # what the student saw, for whoever reads the results
                    if STUCK_DIR:
                        shot = f"{STUCK_DIR}/stuck-{removed}-{int(time.time())}.png"
                        await page.screenshot(path=shot, full_page=True)
                    raise
                await settled(page)

            await wire.timed(results, "remove heads", remove)
        await asyncio.sleep(rng.uniform(0.5, 2.0))


async def student(browser, url: str, seed: int, until: float, results: list) -> None:
    """One browser session (half the class translates, half explores attention)."""
    rng = random.Random(seed)
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)  # a click or a key waits as long as a result may
    try:
        role = translator if seed % 2 == 0 else explorer
        await role(page, url, rng, until, results)
    finally:
        await context.close()


async def one_browser(url: str, seconds: float, seed: int) -> list:
    """One Chromium session alone, as on a student's own machine: a translator for half of
    ``seconds``, then an explorer (load.py's students, one after the other)."""
    from playwright.async_api import async_playwright

    results: list = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for role in (0, 1):  # an even seed translates, an odd one explores
            await student(browser, url, seed + role, time.time() + seconds / 2, results)
        await browser.close()
    return results
