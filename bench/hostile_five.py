"""Round five of the load test's hostile session (``bench/load.py --hostile``, issue 64): the
server under ``uvicorn app:app --host 0.0.0.0`` with header identity and no proxy secret, the
hostile session a client from the network (this machine's own address).

One after another, so that each of the client's heavy jobs finds its one place in line free:
``/_stcore/metrics`` from the network; nine sessions of the client asking for head importance
on 5,000 sentences at once, and a victim from another client (loopback) asking for 10 just
after; "Readers beyond one head" on uploaded gold sets of 2,000 pairs; Alignment links on a
decoder-only model with three prompt templates at once; Patching with a template of about 840
tokens; a model folder whose weights are cut short; malformed attribution results files.
Then rounds three and four (``bench/hostile.py``) until the class's time is up.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from bench.hostile import (
    VIEWPORT,
    Target,
    alerts,
    attempted,
    first_answer,
    gold_files,
    hostile,
    uploaded,
)
from bench.students import TIMEOUT_MS, settled

LM_FOLDER = "gpt2-random"  # the decoder-only model's folder in the bench's checkpoints/
CUT_FOLDER = "cut-short"  # a tiny model folder whose model.safetensors lost its last bytes
NINE = 9  # sessions of one network client asking for heavy work at once
VICTIM_SENTENCES = 1  # the other client's small heavy job (15 s here at a load average of 12)
REFUSED = "already have heavy work"  # a second place in line asked by one client
WAITING = "Waiting for the server's heavy-work slot"  # a place in line, shown
GAVE_UP = "try again in a few minutes"  # a page that waited its longest
IMPORTANCE_DONE = ("stopped after", "computed in", "cannot be computed", REFUSED, GAVE_UP)
READERS_PAIRS = (2000, 200)  # 30-word gold sets: the issue's, then one whose grid fits 30 s
READERS_DONE = ("were not scored", REFUSED, GAVE_UP, "the server scores at most")
MAPS_REFUSED = "attention maps would take"  # the page's bound on one translation's maps
ALIGNMENT_DONE = (  # what an Alignment link ends on (the first that holds, in this order)
    "Opened on the reader",
    "readers scored",
    "would hold",
    MAPS_REFUSED,
    "was not scored",
    "cannot be scored",
    REFUSED,
    GAVE_UP,
)
PATCH_DONE = (
    "would hold",
    MAPS_REFUSED,
    "was stopped",
    REFUSED,
    GAVE_UP,
    "At step",
    "the same way",
)
TEMPLATES = (  # three Alignment links at once: 3, about 10 and 45 template tokens
    "English: {src}\nFrench:",
    "Translate into French.\nEnglish: {src}\nFrench:",
    "Translate each English sentence into French, word by word. English: {src}\nFrench:",
)
LONG_TEMPLATES = {  # Patching's templates: tokens (the bench's tokenizer) -> template
    837: "\N{FOX FACE}" * 207 + " {src}\nFrench:",  # 221 characters
    145: "\N{FOX FACE}" * 35 + " {src}\nFrench:",  # the 150 tokens or so
}
CLEAN, CORRUPT = "the cat sees the dog .", "the dog sees the cat ."
ANSWERS = {"patch_ask": 1, "patch_answer": "es", "patch_wrong": "a"}  # one piece each: random
# weights translate both sentences the same way, so the step and its two answers are given


def decoder_only(folder: Path, gpt2_sized: bool) -> str:
    """A random-weight GPT-2 with the bench's byte-level tokenizer in ``folder``: GPT-2's own
    sizes (124 M parameters) or 8 layers of 12 heads, 96 wide, whose Patching pass over the
    long template still passes the server's bound (302 MB a row; 256 MB allowed)."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    from bench import language_models
    from tests.lm_tiny import byte_level_tokenizer

    if gpt2_sized:
        language_models.build("gpt2-124M", folder)
        return folder.name
    tokenizer = byte_level_tokenizer(bos=False)
    ends = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    sizes = {"n_embd": 96, "n_layer": 8, "n_head": 12, "n_positions": 1024}
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), **sizes, **ends)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder.name


def cut_short(folder: Path) -> None:
    """A tiny Marian folder whose model.safetensors lost its last 100 bytes: its header whole,
    its body short, as during a copy."""
    from tests.hf_tiny import save_tiny

    save_tiny(folder, "marian")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-100])


def round_five_folders(checkpoints: Path, gpt2_sized: bool) -> str:
    """Round five's model folders in the bench's checkpoints/; the decoder-only one's key."""
    decoder_only(checkpoints / LM_FOLDER, gpt2_sized)
    cut_short(checkpoints / CUT_FOLDER)
    return f"checkpoints/{LM_FOLDER}/"


async def session(browser, target: Target, until: float, seen: list) -> None:
    """The hostile session: round five's attacks, then rounds three and four until the
    class's time is up (each at least once)."""
    await round_five(browser, target, seen)
    await hostile(browser, target, until, seen)


async def round_five(browser, target: Target, seen: list) -> None:
    """Round five's attacks, one after another."""
    said = await asyncio.to_thread(metrics_status, target.net)
    seen.append(("GET /_stcore/metrics from the network", said))
    seen.facts["metrics_route"] = said
    await attempted(seen, nine_sessions_and_a_victim, browser, target, seen)
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    await attempted(seen, readers_beyond_one_head, page, target, seen)
    await attempted(seen, alignment_links, context, target, seen)
    for attempt in (long_template, cut_short_weights, malformed_results):
        await attempted(seen, attempt, page, target, seen)
    await context.close()


def metrics_status(base: str) -> str:
    """The HTTP status ``GET /_stcore/metrics`` gets ("200 (OPEN)" where it is served)."""
    try:
        with urllib.request.urlopen(f"{base}/_stcore/metrics", timeout=30) as answer:
            return f"{answer.status} (OPEN)"
    except urllib.error.HTTPError as e:
        return str(e.code)


async def line_with(page, words: str) -> str:
    """The first line of the page's text holding ``words`` (``words`` itself when it is one
    of the bench's own verdicts: "TRACEBACK", "drawn", "no answer …")."""
    if words in ("TRACEBACK", "drawn") or words.startswith("no answer"):
        return words
    text = await page.locator("body").inner_text()
    return next((x.strip()[:110] for x in text.splitlines() if words in x), words)


async def importance_page(browser, base: str, sentences: int):
    """A new browser session on Remove heads, ``sentences`` validation sentences typed in."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    query = urllib.parse.urlencode({"section": "ablation", "sentence": "go ."})
    await page.goto(f"{base}/attention?{query}", timeout=TIMEOUT_MS)
    await settled(page)
    box = page.get_by_role("spinbutton", name="Validation sentences")
    await box.fill(str(sentences))
    await box.press("Enter")
    await settled(page)
    return page


async def compute_importance(page) -> None:
    """Click "Compute head importance"."""
    await page.get_by_role("button", name="Compute head importance").click(timeout=TIMEOUT_MS)


async def place_of(page) -> str:
    """Whether a session that asked for heavy work was turned away, waits in line or runs."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    said = page.get_by_text(REFUSED).or_(page.get_by_text(WAITING))
    try:
        await said.first.wait_for(timeout=20_000)
    except PlaywrightTimeout:
        return "running"
    return "refused" if await page.get_by_text(REFUSED).count() else "waiting"


async def nine_sessions_and_a_victim(browser, target: Target, seen: list) -> None:
    """Nine sessions of the network client ask for head importance on 5,000 sentences at
    once; two seconds later a session of another client (loopback) asks for one sentence:
    how many of the nine were turned away, and whether the victim was served in turn."""
    pages = await asyncio.gather(*(importance_page(browser, target.net, 5000) for _ in range(NINE)))
    victim = await importance_page(browser, target.url, VICTIM_SENTENCES)
    try:
        start = time.perf_counter()
        await asyncio.gather(*map(compute_importance, pages))
        await asyncio.sleep(2)  # the nine in line (or turned away) first
        asked = time.perf_counter()
        await compute_importance(victim)
        places = await asyncio.gather(*map(place_of, pages))
        await count_places(pages, places, seen)
        what = f"victim (another client) asks for {VICTIM_SENTENCES} sentence"
        runs = [(p, f"head importance, 5,000 sentences ({w})") for p, w in zip(pages, places)]
        waits = [answered(victim, asked, what, seen)]  # each timed as its answer comes
        waits += [answered(p, start, w, seen) for p, w in runs if "refused" not in w]
        (said, took, line), *_ = await asyncio.gather(*waits)
        ran = re.search(r"computed in (\d+) s", line)  # its own work: the rest was its wait
        seen.facts.update(victim_served=said == "computed in", victim_answer_s=round(took))
        seen.facts["victim_wait_s"] = round(took - int(ran.group(1))) if ran else None
    finally:
        for page in (*pages, victim):
            await page.context.close()


async def count_places(pages: list, places: list[str], seen: list) -> None:
    """How many of the nine were turned away, wait or run, with what a turned-away one said."""
    counts = {p: places.count(p) for p in ("refused", "waiting", "running")}
    seen.facts.update({f"nine_{k}": n for k, n in counts.items()})
    example = (
        await line_with(pages[places.index("refused")], REFUSED) if "refused" in places else ""
    )
    what = f"{NINE} sessions of one network client ask for heavy work at once"
    seen.append((what, f"{counts}; {example}"[:160]))


async def answered(page, since: float, what: str, seen: list) -> tuple[str, float, str]:
    """Wait for a head importance page's last word; write it down with the seconds since
    ``since``; (which of IMPORTANCE_DONE, those seconds, the page's line)."""
    said = await first_answer(page, IMPORTANCE_DONE, TIMEOUT_MS * 4)
    took = time.perf_counter() - since
    line = await line_with(page, said)
    seen.append((what, f"{line} ({took:.0f} s after asking)"))
    return said, took, line


async def readers_beyond_one_head(page, target: Target, seen: list) -> None:
    """Readers beyond one head on an uploaded gold set of 30-word pairs: 2,000 (the issue's;
    the grid of every head, scored first, may itself pass the limit), else 200, whose grid
    fits it."""
    for pairs in READERS_PAIRS:
        start = time.perf_counter()
        said = await uploaded(page, target.net, gold_files(30, pairs))
        took = time.perf_counter() - start
        what = f"{pairs:,} pairs × 30 words: every head's AER (the grid)"
        seen.append((what, f"{await line_with(page, said)} ({took:.0f} s)"))
        if said == "readers scored":
            break
    else:
        return
    tables = page.locator('[data-testid="stDataFrame"]')
    drawn = tables.nth(await tables.count())  # one table more: the readers were scored
    start = time.perf_counter()
    await page.get_by_role("button", name="Score these readers").click(timeout=TIMEOUT_MS)
    said = await first_answer(page, READERS_DONE, TIMEOUT_MS * 4, more=drawn)
    took = time.perf_counter() - start
    what = f"Readers beyond one head on {pairs:,} pairs × 30 words"
    seen.append((what, f"{await line_with(page, said)} ({took:.0f} s after asking)"))


async def alignment_links(context, target: Target, seen: list) -> None:
    """Three tabs open an Alignment link on the decoder-only model at once, each with another
    prompt template, both ways: each waits in the slot, is scored or is refused."""
    tabs = [await context.new_page() for _ in TEMPLATES]
    start = time.perf_counter()

    async def opened(tab, template: str) -> None:
        query = {"model": target.lm, "section": "alignment", "prompt": template, "both": 1}
        await tab.goto(f"{target.net}/attention?{urllib.parse.urlencode(query)}")
        said = await first_answer(tab, ALIGNMENT_DONE, TIMEOUT_MS * 4)
        took = time.perf_counter() - start
        what = f"Alignment link, both ways, a {len(template)}-character template"
        seen.append((what, f"{await line_with(tab, said)} ({took:.0f} s)"))

    try:
        await asyncio.gather(*(opened(tab, t) for tab, t in zip(tabs, TEMPLATES)))
    finally:
        for tab in tabs:
            await tab.close()


async def long_template(page, target: Target, seen: list) -> None:
    """Patching on the decoder-only model from links whose templates are long: about 840
    tokens, and the issue's 150 or so."""
    for tokens, template in LONG_TEMPLATES.items():
        query = {"model": target.lm, "section": "patch", "prompt": template}
        query |= {"sentence": CLEAN, "corrupt": CORRUPT, **ANSWERS}
        start = time.perf_counter()
        await page.goto(f"{target.net}/attention?{urllib.parse.urlencode(query)}")
        said = await first_answer(page, PATCH_DONE, TIMEOUT_MS)
        line = await alerts(page) if said == "drawn" else await line_with(page, said)
        took = time.perf_counter() - start
        seen.append((f"Patching, a template of {tokens} tokens", f"{line} ({took:.0f} s)"))


async def cut_short_weights(page, target: Target, seen: list) -> None:
    """Translate and Attention asked by a link for the folder whose weights are cut short."""
    for name in ("translate", "attention"):
        await page.goto(f"{target.net}/{name}?model=checkpoints/{CUT_FOLDER}/")
        said = await alerts(page, prefer=CUT_FOLDER)
        unusable = page.locator('[data-testid="stExpander"]').filter(has_text="cannot be used")
        listed = " ".join(await unusable.all_text_contents())
        why = "listed: cut short" if "is cut short" in listed else "NOT listed as cut short"
        seen.append((f"open the cut-short model on {name}", f"{said}; {why}"))


def malformed_files() -> dict[str, bytes]:
    """Attribution results files, each a good record then a malformed line, by file name."""
    good = {
        "line": 0,
        "source": ["go", "."],
        "prefix": ["<bos>"],
        "output": ["va", "!", "<eos>"],
        "contributions": [[0.5, 0.3, 0.2]] * 3,
        "source_share": [0.8, 0.7, 0.6],
        "step_scores": {"perplexity": [1.5, 1.4, 1.3]},
    }
    bad = {
        "rows": json.dumps({**good, "line": 1, "contributions": [[0.5, 0.3, 0.2]] * 2}),
        "nan": json.dumps({**good, "line": 1, "source_share": [0.8, float("nan"), 0.6]}),
        "not-json": "{line: 1, this is not JSON",
        "nested": "[" * 100_000,
    }
    return {f"{k}.jsonl": (json.dumps(good) + "\n" + v + "\n").encode() for k, v in bad.items()}


async def malformed_results(page, target: Target, seen: list) -> None:
    """Attention › Attribution › "Attributions of a whole file": malformed files, each
    answered by one error line."""
    query = urllib.parse.urlencode({"section": "attribution", "sentence": "go ."})
    await page.goto(f"{target.net}/attention?{query}", timeout=TIMEOUT_MS)
    await alerts(page)
    if not await page.get_by_text("Results (.jsonl)").is_visible():  # the expander is closed
        await page.get_by_text("Attributions of a whole file").click(timeout=TIMEOUT_MS)
    drop = page.locator('[data-testid="stExpander"]').filter(has_text="Results (.jsonl)")
    for name, data in malformed_files().items():
        file = {"name": name, "mimeType": "text/plain", "buffer": data}
        await drop.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(file)
        read = (f"{name} cannot be read", "sentences explained")
        said = await first_answer(page, read, TIMEOUT_MS)
        boxes = page.locator('[data-testid="stAlert"]').filter(has_text=f"{name} cannot be read")
        text = (await boxes.first.text_content() or "").strip() if await boxes.count() else said
        lines = "one line" if "\n" not in text else f"{len(text.splitlines())} lines"
        seen.append((f"a malformed results file ({name})", f"{lines}: {text[:100]}"))


def summary(seen) -> dict:
    """Round five's figures for the hostile session's summary line."""
    facts = seen.facts
    stopped = [what for what, said in seen if "stopped after" in said]
    return {
        "metrics_route_from_the_network": facts.get("metrics_route"),
        "nine_sessions_refused": facts.get("nine_refused"),
        "nine_sessions_running": facts.get("nine_running"),
        "nine_sessions_waiting": facts.get("nine_waiting"),
        "victim_served": facts.get("victim_served"),
        "victim_answer_s": facts.get("victim_answer_s"),
        "victim_wait_s": facts.get("victim_wait_s"),
        "hostile_heavy_jobs_stopped_at_the_limit": len(stopped),
        "stopped": stopped,
    }
