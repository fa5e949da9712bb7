"""The token picker: picks from the URL, where they are drawn, outlines, and the page."""

from __future__ import annotations

import contextlib
import json
import shutil

import pytest

from core.attention.maps import select_view
from core.attention.token_pick import parse_pick, pick_label, pick_options, resolve_pick
from core.figures import attention as figs
from core.figures import comparison as cmp_figs
from pages.ui.view_state import ViewState
from tests.helpers import assert_clean, plain, run_page_script

QUERIES = ["je", "suis", "chez", "moi", ".", "<eos>"]
KEYS = ["i'm", "home", ".", "<eos>"]
DECODER_KEYS = ["<bos>", "je", "suis", "chez", "moi", "."]


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("q0", ("query", 0)),
        ("k12", ("key", 12)),
        ("", None),
        ("q", None),
        ("q-1", None),
        ("x3", None),
        ("k1.5", None),
        ("Q2", None),
    ],
)
def test_picks_are_read_from_the_url_or_ignored(token, expected):
    assert parse_pick(token) == expected


def test_picker_lists_every_query_and_key_with_its_index():
    options = pick_options(QUERIES, KEYS)
    assert options[0] == "" and len(options) == 1 + len(QUERIES) + len(KEYS)
    assert pick_label("", QUERIES, KEYS) == "none"
    assert pick_label("q2", QUERIES, KEYS) == "query: chez (2)"
    assert pick_label("k3", QUERIES, KEYS) == "key: <eos> (3)"


@pytest.mark.parametrize(
    ("token", "hide", "axis", "index", "problem"),
    [
        ("q2", False, "query", 2, ""),
        ("q2", True, "query", 2, ""),  # rows are never hidden
        ("k3", False, "key", 3, ""),
        ("k1", True, "key", 0, ""),  # <bos> (column 0) hidden: "je" moves to column 0
        ("k0", True, "key", -1, "hidden"),
        ("k9", False, "key", -1, "outside this map"),
        ("q6", True, "query", -1, "outside this map"),
    ],
)
def test_a_pick_is_drawn_where_its_token_is_shown(token, hide, axis, index, problem):
    pick = resolve_pick(token, QUERIES, DECODER_KEYS, hide)
    assert (pick.axis, pick.index) == (axis, index)
    assert problem in pick.problem and bool(pick.problem) == bool(problem)
    assert resolve_pick("", QUERIES, DECODER_KEYS, hide) is None


def test_outline_of_a_row_and_of_a_column():
    (row,) = cmp_figs.highlight_shapes(resolve_pick("q2", QUERIES, KEYS, False))
    assert (row["yref"], row["y0"], row["y1"]) == ("y", 1.5, 2.5)
    assert (row["xref"], row["x0"], row["x1"]) == ("x domain", 0, 1)
    (col,) = cmp_figs.highlight_shapes(resolve_pick("k1", QUERIES, DECODER_KEYS, True))
    assert (col["xref"], col["x0"], col["x1"]) == ("x", -0.5, 0.5)
    assert col["yref"] == "y domain" and col["type"] == "rect"
    assert cmp_figs.highlight_shapes(resolve_pick("k0", QUERIES, DECODER_KEYS, True)) == []


def test_a_pick_is_outlined_on_the_large_map_and_every_grid_cell(home_translation):
    _, maps = home_translation
    queries, keys = maps.tokens("decoder_self")
    pick = resolve_pick("k2", queries, keys, True)  # "suis", column 1 once <bos> is hidden
    big = figs.view_figure(select_view(maps, "decoder_self", 0, "0", True))
    (shape,) = cmp_figs.add_highlight(big, pick).layout.shapes
    assert (shape.x0, shape.x1) == (0.5, 1.5)
    assert figs.plotly_text(keys[2]) in big.data[0].x[1]  # the outlined column is "suis"
    grid = cmp_figs.add_highlight(figs.grid_view_figure(maps, "decoder_self", True), pick)
    cells = maps.layers("decoder_self") * maps.heads
    assert len(grid.layout.shapes) == cells
    assert {s.xref for s in grid.layout.shapes} == {
        t.xaxis or "x" for t in grid.data if t.type == "heatmap"
    }
    assert cmp_figs.add_highlight(big, None) is big


def test_comparison_and_token_fields_round_trip_through_the_url():
    state = ViewState(other="runs/a/last.pt", other_sentence="i'm cold .", token="k3")
    query = state.to_query()
    assert {query[k] for k in ("other", "other_sentence", "token")} == {
        "runs/a/last.pt",
        "i'm cold .",
        "k3",
    }
    assert ViewState.from_query(query) == state
    assert not {"other", "other_sentence", "token"} & set(ViewState().to_query())


# ----------------------------------------------------------------------------- the page


def run_page(query: dict):
    """The Attention page run once with these URL parameters."""
    return run_page_script("attention.py", query)


def shapes(at, index: int) -> list[dict]:
    """The layout shapes of the page's index-th Plotly chart."""
    spec = json.loads(at.get("plotly_chart")[index].proto.spec)
    return spec["layout"].get("shapes", [])


def test_picking_a_token_puts_it_in_the_url_and_outlines_it(studio_dirs):
    at = run_page({"kind": "cross"})
    assert_clean(at)
    assert shapes(at, 0) == [] and "token" not in at.query_params
    at.selectbox(key="at_token").set_value("k1").run()
    assert_clean(at)
    assert at.query_params["token"] == "k1"
    (box,) = shapes(at, 0)
    assert (box["x0"], box["x1"], box["yref"]) == (0.5, 1.5, "y domain")
    assert len(shapes(at, 1)) == 2 * 4  # every cell of the tiny model's overview
    assert any("key 1 (home)" in plain(c.value) for c in at.caption)


def test_a_token_from_the_url_survives_hiding_and_bad_ones_are_dropped(studio_dirs):
    at = run_page({"kind": "cross", "hide": "1", "token": "k3"})  # <eos>, hidden
    assert_clean(at)
    assert shapes(at, 0) == []
    assert any("hidden" in plain(c.value) for c in at.caption)
    assert at.query_params["token"] == "k3"
    at = run_page({"kind": "cross", "token": "q99"})
    assert_clean(at)
    assert "token" not in at.query_params and shapes(at, 0) == []
    (note,) = [plain(w.value) for w in at.warning if "The link asked for" in w.value]
    assert "`token=q99`" in note and "not a row or column of this map" in note
    assert at.selectbox(key="at_token").value == ""


def test_compare_two_models_shows_both_translations_and_the_difference(
    studio_dirs, wide_checkpoint
):
    shutil.copy(wide_checkpoint, studio_dirs["checkpoints"] / "wide.pt")
    query = {"section": "Compare", "other": "checkpoints/wide.pt", "kind": "cross"}
    at = run_page(query)
    assert_clean(at)
    assert at.query_params["other"] == "checkpoints/wide.pt"
    text = " ".join(m.value for m in at.markdown)
    assert "**A:** je suis chez moi" in text and text.count("**B:**") == 1
    assert any("A has 2 layers × 4 heads" in i.value for i in at.info)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [s["layout"]["title"]["text"].replace("<br>", " ") for s in specs]
    assert titles[0].startswith("A: Cross") and titles[1].startswith("B: Cross")
    diff = specs[2]
    assert diff["data"][0]["colorscale"] and diff["data"][0]["zmin"] == -diff["data"][0]["zmax"]
    assert specs[3]["layout"]["coloraxis"]["cmin"] == -specs[3]["layout"]["coloraxis"]["cmax"]
    assert len([t for t in specs[3]["data"] if t.get("name") != "blank"]) == 2 * 4
    assert at.radio(key="cmp_forced").value == "A"  # the outputs differ: both read A's
    options = at.radio(key="cmp_forced").proto.options  # Markdown: model output escaped
    assert options[0] == "A\\'s output\\: je suis chez moi \\."
    labels = [b.proto.label for b in at.get("download_button")]
    assert "A, B and B − A as CSV" in labels and "Candidates as CSV" in labels


def test_compare_two_sentences_aligns_them(studio_dirs):
    query = {"section": "Compare", "other_sentence": "i'm cold .", "kind": "encoder"}
    at = run_page(query)
    assert_clean(at)
    assert at.radio(key="cmp_mode").value == "two sentences"
    assert at.query_params["other_sentence"] == "i'm cold ."
    assert "other" not in at.query_params
    assert any("Aligned by token" in plain(c.value) for c in at.caption)
    assert any("Only in A" in c.value and "home" in plain(c.value) for c in at.caption)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert specs[0]["layout"]["xaxis"]["ticktext"] == ["i'm", "home ≠ cold", ".", "&lt;eos&gt;"]


def test_compare_two_sentences_keeps_the_cross_attention_rows_that_differ(studio_dirs):
    """Issue #21, item 9: only the shared ./<eos> rows used to be left.

    B is a training pair of the tiny corpus, so the two translations differ whatever the
    tiny model's weights ("i'm cold ." is not one: it got A's translation once)."""
    at = run_page({"section": "Compare", "other_sentence": "he is cold .", "kind": "cross"})
    assert_clean(at)
    sides = [m.value for m in at.markdown if m.value.startswith(("**A:**", "**B:**"))]
    outputs = [plain(v).split("→ ", 1)[1].split() for v in sides]  # A's and B's French
    assert len(outputs) == 2 and outputs[0] != outputs[1], outputs
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    for spec in specs[:3]:  # A, B and B − A
        rows = " ".join(spec["layout"]["yaxis"]["ticktext"])
        assert all(w in rows for w in outputs[0] + outputs[1]), (rows, outputs)
    assert len(specs[0]["layout"]["yaxis"]["ticktext"]) >= max(map(len, outputs)) + 1  # <eos>


def test_a_clickable_map_carries_each_drawn_cell_and_its_hover():
    import numpy as np

    from core.attention.token_pick import pick_from_cell
    from core.figures.clicks import CLICK_NAME, clickable, clicked_cell

    weights = np.array([[0.2, 0.8, 0.0], [np.nan, np.nan, np.nan]], dtype=np.float32)
    fig = clickable(figs.heatmap_figure(weights, ["a", "b"], ["x", "y", "z"], "cross"))
    points = next(t for t in fig.data if t.name == CLICK_NAME)
    assert [tuple(c[:2]) for c in points.customdata] == [(0, 0), (0, 1), (0, 2)]  # no blank row
    assert list(points.x) == list(fig.data[0].x) and points.customdata[1][2] == pytest.approx(0.8)
    assert "customdata[2]" in points.hovertemplate and fig.data[0].hoverinfo == "skip"
    assert clicked_cell({"selection": {"points": [{"customdata": {"0": 0, "1": 2}}]}}) == (
        0,
        2,
    )
    assert clicked_cell({"selection": {"points": [{"customdata": [1, 0, 0.5]}]}}) == (1, 0)
    for junk in (None, {}, {"selection": {"points": []}}, {"selection": {"points": [{}]}}):
        assert clicked_cell(junk) is None
    assert clicked_cell({"selection": {"points": [{"customdata": [-1, 0.5]}]}}) is None
    keys = ["<bos>", "je", "suis"]
    assert pick_from_cell("query", 1, 0, keys, hide=True) == "q1"
    assert pick_from_cell("key", 1, 0, keys, hide=True) == "k1"  # <bos> hidden: column 0 = key 1
    assert pick_from_cell("key", 1, 0, keys, hide=False) == "k0"
    with pytest.raises(ValueError):
        pick_from_cell("cell", 0, 0, keys, hide=False)


def test_a_lines_views_tokens_carry_what_a_click_on_them_picks():
    import numpy as np

    from core.figures.clicks import clicked_token
    from core.figures.inside_head import lines_figure

    w = np.full((1, 2, 3), 1 / 3, dtype=np.float32)
    fig = lines_figure(w, ["a", "b"], ["x", "y", "z"], "cross", [0], "t")
    marks = {t.customdata[0][0]: t for t in fig.data if t.customdata is not None}
    assert [list(c) for c in marks["key"].customdata] == [["key", 0], ["key", 1], ["key", 2]]
    assert [list(c) for c in marks["query"].customdata] == [["query", 0], ["query", 1]]
    assert clicked_token({"selection": {"points": [{"customdata": {"0": "key", "1": 2}}]}}) == (
        "key",
        2,
    )
    for junk in ({"selection": {"points": [{"customdata": ["cell", 1]}]}}, None, {}):
        assert clicked_token(junk) is None
    assert clicked_token({"selection": {"points": [{"customdata": ["query", -1]}]}}) is None


# ----------------------------------------------------------------------------- real browser


OUTLINED = "n => document.querySelectorAll('.js-plotly-plot .shapelayer path').length >= n"


def test_compare_and_a_picked_token_draw_in_a_browser(app_server, browser_page, tiny_run):
    from urllib.parse import urlencode

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from tests.helpers import ARTIFACTS, assert_no_browser_exception
    from tests.test_browser_attention import LAYOUT_PROBLEMS, settle

    runs = app_server["runs"]
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    base = {"model": "runs/browser-tiny/last.pt", "kind": "cross"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3000})
        query = {**base, "section": "Compare", "other": "runs/browser-tiny/best.pt"}
        page.goto(f"{url}/attention?" + urlencode(query))
        settle(page, 3 + 2 * 4)  # A, B, B − A and the 2 × 4 grid of differences
        assert_no_browser_exception(page)
        assert page.get_by_role("button", name="A, B and B − A as CSV").count() == 1
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        page.screenshot(path=str(ARTIFACTS / f"attention_compare_{width}.png"), full_page=True)
        page.goto(f"{url}/attention?" + urlencode({**base, "token": "k1"}))
        settle(page, 1 + 2 * 4)
        with contextlib.suppress(PlaywrightTimeout):  # Plotly draws shapes after the heatmaps
            page.wait_for_function(OUTLINED, arg=1 + 2 * 4, timeout=30_000)
        outlines = page.locator(".js-plotly-plot .shapelayer path").count()
        assert outlines >= 1 + 2 * 4  # the large map and every cell of the overview
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        page.screenshot(path=str(ARTIFACTS / f"attention_token_{width}.png"), full_page=True)


CELL = """([row, col]) => {
  const gd = document.querySelector('.js-plotly-plot');  // the large map comes first
  const t = gd && (gd._fullData || []).find(d => d.name === 'cell'), L = gd && gd._fullLayout;
  if (!t || !L) return null;  // a slow rerun may still be redrawing the map
  const i = t.customdata.findIndex(c => c[0] === row && c[1] === col);
  const box = gd.getBoundingClientRect();
  return [box.left + L.xaxis._offset + L.xaxis.d2p(t.x[i]),
          box.top + L.yaxis._offset + L.yaxis.d2p(t.y[i])];
}"""


def click_point(page, point_js: str, arg, done_js: str, done_arg=None, heatmaps: int = 0):
    """Click the point ``point_js`` finds (a Plotly mark) until ``done_js`` holds: the page
    settles first; a click the page lost (not done after 60 s, nor once the app is idle
    again) is made once more, never a third time."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from tests.test_browser_attention import settle

    for attempt in range(2):
        settle(page, heatmaps)
        page.wait_for_function(point_js, arg=arg, timeout=60_000)  # drawn
        x, y = page.evaluate(point_js, arg)
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        try:
            page.wait_for_function(done_js, arg=done_arg, timeout=60_000)
            return
        except PlaywrightTimeout:
            settle(page, heatmaps)  # a slow rerun ends here
            if page.evaluate(done_js, done_arg):
                return
            if attempt:
                raise


def test_a_click_on_a_cell_outlines_its_row_or_its_column(app_server, browser_page, tiny_run):
    """bertviz's click to explore: a click on a cell of the large map outlines its query row,
    or (with the control on "column") its key column, counted past hidden <bos>/<eos>."""
    from urllib.parse import parse_qs, urlencode, urlparse

    from tests.helpers import assert_no_browser_exception
    from tests.test_browser_attention import settle

    shutil.copytree(tiny_run, app_server["runs"] / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    query = {"model": "runs/browser-tiny/last.pt", "kind": "decoder_self", "sentence": "i'm home ."}
    page.set_viewport_size({"width": 1400, "height": 2200})  # the large map in view
    page.goto(f"{url}/attention?" + urlencode({**query, "hide": "1"}))
    settle(page, 1 + 2 * 4)

    def click(row: int, col: int, token: str) -> None:
        done = "t => location.search.includes('token=' + t)"
        click_point(page, CELL, [row, col], done, token, heatmaps=1 + 2 * 4)
        settle(page, 1 + 2 * 4)
        assert parse_qs(urlparse(page.url).query)["token"] == [token]
        assert page.locator(".js-plotly-plot .shapelayer path").count() >= 1 + 2 * 4

    click(2, 1, "q2")  # a row: the query as drawn
    page.get_by_text("column (key)", exact=True).click()
    settle(page, 1 + 2 * 4)
    click(2, 0, "k1")  # <bos> (key 0) is hidden: the first column drawn is key 1
    assert_no_browser_exception(page)


TOKEN_MARK = """([side, index]) => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const t = (gd._fullData || []).find(d => d.customdata && d.customdata[0]
                                             && d.customdata[0][0] === side);
    if (!t) continue;
    const L = gd._fullLayout, box = gd.getBoundingClientRect();
    return [box.left + L.xaxis._offset + L.xaxis.d2p(t.x[index]),
            box.top + L.yaxis._offset + L.yaxis.d2p(t.y[index])];
  }
  return null;
}"""


def test_a_click_on_a_token_in_the_lines_view_keeps_its_lines(app_server, browser_page, tiny_run):
    """bertviz's head view: a click on a key shows its lines only; a second click, all."""
    from urllib.parse import parse_qs, urlencode, urlparse

    from tests.helpers import assert_no_browser_exception
    from tests.test_browser_attention import settle

    shutil.copytree(tiny_run, app_server["runs"] / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    page.set_viewport_size({"width": 1400, "height": 3000})  # the lines view in view
    query = {"model": "runs/browser-tiny/last.pt", "kind": "cross", "section": "inside"}
    page.goto(f"{url}/attention?" + urlencode(query))
    settle(page)
    page.get_by_text("Lines: every query → key pair").wait_for(timeout=60_000)
    for expected in (["k1"], None):
        done = "s => location.search.includes('token=k1') === s"
        click_point(page, TOKEN_MARK, ["key", 1], done, bool(expected))
        settle(page)
        assert parse_qs(urlparse(page.url).query).get("token") == expected
    assert_no_browser_exception(page)
