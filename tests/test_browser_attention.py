"""Real browser: translate a sentence, open the Attention page, redraw the heatmaps.

How fast the heatmaps draw is measured by the benchmarks (bench/), not here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

from core.figures.head_roles import ROLES_TITLE
from tests.helpers import ARTIFACTS, SHIPPED, assert_no_browser_exception

LONG_TINY = "the cat sees the dog and the dog sees the cat ."  # 11 words the tiny model knows
LONG_REAL = "i think that we should go to the beach together tomorrow morning ."  # 12 words

ALL_DRAWN = """([title, n, roles]) => {
    const name = p => (p.querySelector('.gtitle') || {}).textContent || '';
    const plots = [...document.querySelectorAll('.js-plotly-plot')]
        .filter(p => !name(p).startsWith(roles));
    const heatmaps = plots.flatMap(p => [...p.querySelectorAll('.hm')]);
    const titled = plots.filter(p => name(p).includes(title));
    return heatmaps.length >= n && plots.length >= 2 && titled.length === plots.length;
}"""


MAP_HEATMAPS = """(roles) => [...document.querySelectorAll('.js-plotly-plot')]
    .filter(p => !((p.querySelector('.gtitle') || {}).textContent || '').startsWith(roles))
    .flatMap(p => [...p.querySelectorAll('.hm')]).length"""


def wait_for_heatmaps(page, title: str, count: int, timeout_s: float = 60) -> None:
    """Wait until ``count`` heatmaps are drawn and every chart's title has ``title`` (the
    head roles' maps under them, one per attention kind whatever the kind shown, aside)."""
    page.wait_for_function(ALL_DRAWN, arg=[title, count, ROLES_TITLE], timeout=timeout_s * 1000)


def test_translate_then_inspect_attention(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    model = "runs/browser-tiny/last.pt"

    page.goto(f"{url}/translate?" + urlencode({"model": model}))
    box = page.get_by_role("textbox", name="English sentence")
    box.fill("i'm home .")
    box.press("Enter")
    page.get_by_text("je suis chez moi .", exact=True).first.wait_for(timeout=60_000)
    assert_no_browser_exception(page)

    page.get_by_text("Inspect its attention").click()
    wait_for_heatmaps(page, "Cross attention", 1 + 2 * 4)  # large map + 2 layers × 4 heads
    assert_no_browser_exception(page)
    assert "kind=cross" in page.url and "sentence=i%27m+home" in page.url.replace("%20", "+")
    assert page.get_by_text("output token (query)").count() >= 1

    page.get_by_text("Encoder self", exact=True).click()
    wait_for_heatmaps(page, "Encoder self-attention", 9)
    assert_no_browser_exception(page)
    assert "kind=encoder" in page.url

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 2200})
    page.screenshot(path=str(ARTIFACTS / "attention_page.png"))


def test_heatmaps_of_a_long_sentence_redraw_for_every_kind(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    if SHIPPED.is_file():
        query = {"model": "checkpoints/fra-eng-small.pt", "sentence": LONG_REAL}
    else:
        query = {"model": "runs/browser-tiny/last.pt", "sentence": LONG_TINY}
    page.goto(f"{url}/attention?" + urlencode({**query, "kind": "encoder"}))
    page.locator(".js-plotly-plot .hm").first.wait_for(timeout=90_000)
    n = page.evaluate(MAP_HEATMAPS, ROLES_TITLE)  # the maps' (the roles' maps aside)
    for kind, title in (
        ("Cross", "Cross attention"),
        ("Decoder self", "Decoder self"),
        ("Encoder self", "Encoder self"),
    ):
        page.get_by_text(kind, exact=True).click()
        wait_for_heatmaps(page, title, n)
        assert_no_browser_exception(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "attention_long_sentence.png"))


# ----------------------------------------------------------------------------- layout at two widths

LAYOUT_PROBLEMS = r"""() => {
    const problems = [];
    const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1
                               && r.top >= box.top - 1;
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
        const box = plot.getBoundingClientRect();
        const title = plot.querySelector('.gtitle');
        const sub = plot.querySelector('.gtitle-subtitle');
        const heads = [...plot.querySelectorAll('.annotation')].map(a => a.getBoundingClientRect());
        const area = plot.querySelector('.cartesianlayer .bg, .nsewdrag');
        const tops = [...heads.map(h => h.top), area ? area.getBoundingClientRect().top : 1e9];
        for (const el of [title, sub].filter(Boolean)) {
            const r = el.getBoundingClientRect();
            if (!inside(r, box)) problems.push('cut: ' + el.textContent);
            if (r.bottom > Math.min(...tops) + 1) problems.push('overlaps: ' + el.textContent);
        }
        const legend = plot.querySelector('.legend .bg');
        const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
                               && a.top < b.bottom - 1 && b.top < a.bottom - 1;
        const tickText = [...plot.querySelectorAll('.cartesianlayer [class$="tick"] > text')];
        const ticks = tickText.map(t => t.getBoundingClientRect()).filter(r => r.width > 0);
        const upright = t => !/rotate\((?!0[,)])/.test(t.getAttribute('transform') || '');
        const level = tickText.filter(upright)
            .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.width > 0);
        level.forEach(([a, ra], i) => level.slice(i + 1).forEach(([b, rb]) => {
            if (meet(ra, rb)) problems.push('ticks collide: ' + a + ' / ' + b);
        }));
        for (const a of plot.querySelectorAll('.annotation')) {
            const r = a.getBoundingClientRect();
            if (ticks.some(t => meet(r, t))) problems.push('on tick labels: ' + a.textContent);
        }
        for (const t of plot.querySelectorAll('.infolayer [class*="title"]:not(.gtitle)')) {
            if (legend && t.textContent && meet(legend.getBoundingClientRect(),
                                                t.getBoundingClientRect())) {
                problems.push('legend on axis title: ' + t.textContent);
            }
        }
    }
    for (const grid of document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')) {
        const wide = grid.closest('[class*="st-key-scrolls-"]');  // sideways by design
        if (!wide && grid.scrollWidth > grid.clientWidth + 1) {
            const frame = grid.closest('[data-testid="stDataFrame"]');
            problems.push('table cut: ' + (frame.getAttribute('aria-label') || 'a table'));
        }
    }
    for (const el of document.querySelectorAll('[data-testid="stWidgetLabel"] *')) {
        if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflow === 'hidden') {
            problems.push('label cut: ' + el.textContent);
        }
    }
    for (const button of document.querySelectorAll('[data-testid="stButtonGroup"] button')) {
        const column = button.closest('[data-testid="stColumn"]');  // clipped by its column
        const right = column && column.getBoundingClientRect().right;
        if (column && button.getBoundingClientRect().right > right + 1) {
            problems.push('button cut: ' + button.textContent);
        }
    }
    return problems;
}"""
SECTIONS = ("Maps", "Decoding playback", "Over training")
TINY_MODEL = "runs/browser-tiny/last.pt"


SETTLED = """n => document.querySelectorAll('.js-plotly-plot .hm').length >= n
    && document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
    && !document.querySelector('[data-stale="true"]')"""


def settle(page, heatmaps: int = 0) -> None:
    """Wait for ``heatmaps`` drawn heatmaps and for the app to stop running, as Streamlit's
    own browser tests wait (``wait_for_app_run``): a moment for a rerun the last action
    asked for to start, then the app root's script state "notRunning" with no stale
    element, then a moment for Plotly's last draw."""
    page.wait_for_timeout(200)
    page.wait_for_function(SETTLED, arg=heatmaps, timeout=90_000)
    page.wait_for_timeout(150)


def look(page, name: str) -> list[str]:
    """Save a full-page screenshot under tests/artifacts; return what is cut or overlaps."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    return page.evaluate(LAYOUT_PROBLEMS)


def test_pages_read_well_from_760_to_1400_px(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    problems = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3000})  # the whole page
        page.goto(f"{url}/translate?" + urlencode({"model": TINY_MODEL, "beam": "4"}))
        page.get_by_text("je suis chez moi .", exact=True).first.wait_for(timeout=60_000)
        settle(page)
        problems[f"translate_{width}"] = look(page, f"translate_{width}")
        for section in SECTIONS:
            query = {"model": TINY_MODEL, "kind": "decoder_self", "hide": "1", "section": section}
            page.goto(f"{url}/attention?" + urlencode({**query, "step": "2"}))
            settle(page, 4)
            assert_no_browser_exception(page)
            name = f"attention_{section.split()[0].lower()}_{width}"
            problems[name] = look(page, name)
    assert not any(problems.values()), problems


def test_a_long_paste_stays_in_the_box(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    page.goto(f"{url}/translate?" + urlencode({"model": TINY_MODEL}))
    box = page.get_by_role("textbox", name="English sentence")
    paste = ("i'm home . " * 154)[:1538]
    box.fill(paste)
    box.press("Enter")
    page.get_by_text("1,538 characters").first.wait_for(timeout=60_000)
    assert box.input_value() == paste
    assert page.get_by_text("The sentence is empty").count() == 0


def test_downloads_are_named_by_the_view(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    query = {"model": TINY_MODEL, "kind": "decoder_self", "layer": "1", "head": "2"}
    page.goto(f"{url}/attention?" + urlencode(query))
    settle(page, 9)
    name = "browser-tiny-last_im-home_decoder-self_layer1_head2"
    with page.expect_download() as csv:
        page.get_by_role("button", name="Weights as CSV").click()
    assert csv.value.suggested_filename == f"{name}.csv"
    chart = page.locator(".js-plotly-plot").first
    chart.hover()
    with page.expect_download(timeout=60_000) as png:
        chart.get_by_role("button", name="Download plot as a PNG").click()
    assert png.value.suggested_filename == f"{name}.png"


STATS_AND_MAP = """() => {
    const csv = [...document.querySelectorAll('button')]
        .find(b => b.textContent.includes('Weights as CSV'));
    const panel = csv.closest('.st-key-head_summary, [data-testid="stColumn"]');
    const big = document.querySelector('.st-key-big .js-plotly-plot');
    const box = e => { const r = e.getBoundingClientRect();
                       return {left: r.left, top: r.top, width: r.width, bottom: r.bottom}; };
    return {stats: box(panel), map: box(big)};
}"""


def test_head_statistics_stack_below_the_large_map_at_760_px(app_server, browser_page, tiny_run):
    """At 760 px the head's statistics beside the large map were a strip of about 100 px;
    on a narrow page they go below the map, at a readable width (the screenshot shows it)."""
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    boxes = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 1800})
        page.goto(f"{url}/attention?" + urlencode({"model": TINY_MODEL}))
        settle(page, 9)
        page.get_by_text("Weights as CSV").first.wait_for()
        page.locator(".st-key-big .js-plotly-plot").wait_for()  # the large map itself, drawn
        boxes[width] = page.evaluate(STATS_AND_MAP)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"attention_head_statistics_{width}.png"))
    narrow, wide = boxes[760], boxes[1400]
    assert narrow["stats"]["top"] >= narrow["map"]["bottom"] - 1, narrow  # below the map
    assert narrow["stats"]["width"] >= 250, narrow  # was 137
    assert wide["stats"]["top"] < wide["map"]["bottom"], wide  # beside it where both fit
    assert wide["stats"]["width"] >= 250, wide
