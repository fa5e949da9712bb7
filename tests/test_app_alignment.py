"""AppTest of the Attention page's "Alignment" section (word links, AER on a gold set)."""

from __future__ import annotations

import json
import shutil

import numpy as np
from streamlit.testing.v1 import AppTest

from core.alignment.extract import BOTH_WAYS
from core.alignment.gold import studio_gold
from tests.helpers import assert_clean, plain, run_page_script
from tests.test_app_attribution import query, specs, title, z_of

SECTION = {"section": "alignment"}
SENTENCE = "the cat sees the dog ."  # "the" twice; the tiny model: "le chat voit le chien ."
PAIRS = b"the cat sees the dog . ||| le chat voit le chien .\ni'm home . ||| je suis chez moi .\n"


def run_page(query: dict | None = None) -> AppTest:
    """The Attention page on its "Alignment" section (with more URL parameters)."""
    return run_page_script("attention.py", {**SECTION, **(query or {})})


def charts(at: AppTest) -> dict[str, dict]:
    """The section's Plotly figures by their first title words."""
    return {title(s).split(" — ")[0].split(",")[0]: s for s in specs(at)}


def pharaoh(at: AppTest) -> set[tuple[int, int]]:
    """The links of the Pharaoh line shown under the charts."""
    (line,) = [c.value for c in at.code]
    return {tuple(map(int, link.split("-"))) for link in line.split()}


def test_the_reader_s_links_are_circled_drawn_and_written(studio_dirs):
    at = run_page({"sentence": SENTENCE, "layer": "1", "head": "2"})
    assert_clean(at)
    matrix = charts(at)["AWO (attention when outputting)"]
    assert title(matrix).endswith("— layer 1, head 2")
    assert "the step that outputs it" in matrix["layout"]["title"]["subtitle"]["text"]
    x, y = matrix["layout"]["xaxis"], matrix["layout"]["yaxis"]
    assert x["ticktext"] == ["the", "cat", "sees", "the", "dog", "."]  # no <eos> column
    assert y["ticktext"] == ["le", "chat", "voit", "le", "chien", "."]  # no <eos> row
    links = pharaoh(at)
    circles = matrix["data"][-1]
    cells = {
        (x["tickvals"].index(a), y["tickvals"].index(b)) for a, b in zip(circles["x"], circles["y"])
    }
    assert cells == links and len(links) == 6  # one word per piece: the cells are the links
    z = z_of(matrix)  # (T, S)
    assert all(z[t].argmax() == s for s, t in links)  # each French token's largest weight
    lines = charts(at)[f"{len(links)} links as lines"]
    assert sum(t.get("name") == "link" for t in lines["data"]) == len(links)
    labels = [b.label for b in at.get("download_button")]
    assert {"Links as CSV", "AER of every reader as CSV"} <= set(labels)


def best_reader(at: AppTest) -> dict:
    """The best row of the AER table (the shipped gold set)."""
    return at.dataframe[0].value.iloc[0].to_dict()


def shows(at: AppTest, row: dict) -> None:
    """The view shows this reader: cross attention, its mode, layer and head."""
    assert at.radio(key="at_kind").value == "cross"
    assert at.button_group(key="al_mode").value == row["mode"].lower()
    if row["layer"] == "all":
        assert at.checkbox(key="al_all").value
    else:
        shown = (str(at.selectbox(key="at_layer").value), at.selectbox(key="at_head").value)
        assert shown == (str(row["layer"]), str(row["head"]))


def test_alignment_opens_on_the_best_reader_and_says_so(studio_dirs):
    at = run_page({"sentence": SENTENCE})  # a URL that names no layer or head
    assert_clean(at)
    best = best_reader(at)
    shows(at, best)
    (note,) = [plain(i.value) for i in at.info if "Opened on the reader" in i.value]
    assert f"AER {best['AER']:.3f}" in note and best["mode"].upper() in note
    at.selectbox(key="at_head").set_value("mean").run()  # the user's choice then stands
    assert_clean(at)
    assert at.selectbox(key="at_head").value == "mean"
    assert not [i for i in at.info if "Opened on the reader" in i.value]
    maps = run_page_script("attention.py", {"sentence": SENTENCE, "layer": "0", "head": "0"})
    maps.radio(key="at_section").set_value("alignment").run()  # opened from the picker
    assert_clean(maps)
    shows(maps, best)
    named = run_page({"sentence": SENTENCE, "layer": "0", "head": "1"})  # a URL that names one
    assert (named.selectbox(key="at_layer").value, named.selectbox(key="at_head").value) == (
        0,
        "1",
    )
    assert not [i for i in named.info if "Opened on the reader" in i.value]
    both = run_page({"sentence": SENTENCE, "both": "1"})  # read both ways: that grid's best
    assert_clean(both)
    shows(both, best_reader(both))
    (note,) = [plain(i.value) for i in both.info if "Opened on the reader" in i.value]
    assert f"read both ways (AER {best_reader(both)['AER']:.3f})" in note


def test_the_mode_travels_in_the_url_and_moves_the_row(studio_dirs):
    at = run_page({"sentence": SENTENCE, "layer": "0", "head": "0"})
    assert_clean(at)
    assert "align" not in query(at)  # the default, AWO
    awo = z_of(charts(at)["AWO (attention when outputting)"])
    at.button_group(key="al_mode").set_value("awi").run()
    assert_clean(at)
    assert query(at)["align"] == "awi"
    awi = z_of(charts(at)["AWI (attention when inputting)"])
    assert not np.allclose(awo, awi)
    again = run_page(query(at))  # a reload or a shared link
    assert_clean(again)
    assert again.button_group(key="al_mode").value == "awi"
    assert np.allclose(z_of(charts(again)["AWI (attention when inputting)"]), awi)
    at.radio(key="at_section").set_value("maps").run()
    assert "align" not in query(at)  # it means something in this section only
    bad = run_page({"align": "<b>bogus</b>", "layer": "0"})
    assert_clean(bad)
    assert bad.button_group(key="al_mode").value == "awo" and "align" not in query(bad)


def test_other_views_read_the_layer_s_cross_attention_or_every_layer(studio_dirs):
    at = run_page({"sentence": SENTENCE, "kind": "encoder", "layer": "1", "head": "rollout"})
    assert_clean(at)
    assert title(specs(at)[0]).endswith("— layer 1, mean of heads")
    assert any("This section reads cross attention" in plain(c.value) for c in at.caption)
    at.checkbox(key="al_all").check().run()
    assert_clean(at)
    assert title(specs(at)[0]).endswith("— mean of all layers and heads")


def test_the_shipped_gold_set_gives_every_reader_s_aer(studio_dirs):
    at = run_page()
    assert_clean(at)
    n = len(studio_gold()[0])
    assert at.radio(key="al_gold").options[0] == f"The shipped gold set ({n} pairs)"
    table = at.dataframe[0].value
    assert len(table) == 2 * (2 * (4 + 1) + 1)  # 2 modes × (2 layers × (4 heads + mean) + all)
    assert list(table["AER"]) == sorted(table["AER"]) and set(table["pairs"]) == {n}
    best = table.iloc[0]
    (words,) = [plain(m.value) for m in at.markdown if "readers scored" in m.value]
    assert f"AER {best['AER']:.3f}" in words and f"{best['mode']}" in words
    grids = [s for s in specs(at) if title(s).startswith("AER of each reader")]
    assert len(grids) == 2
    stars = [v for g in grids for row in g["data"][0]["text"] for v in row if "★" in v]
    assert len(stars) == 2  # the best cell of each mode
    assert any("bench/alignment.py" in c.value or "scores AER" in c.value for c in at.caption)


def upload(at: AppTest, pairs: bytes, gold: bytes, name: str = "hand.gold") -> AppTest:
    """Pick "Upload" and give both files."""
    at.radio(key="al_gold").set_value("upload").run()
    at.file_uploader(key="al_pairs_file").set_value(("mine.txt", pairs, "text/plain"))
    at.file_uploader(key="al_gold_file").set_value((name, gold, "text/plain"))
    return at.run()


def test_an_uploaded_gold_set_is_scored_and_a_bad_line_is_named(studio_dirs):
    at = run_page({"sentence": SENTENCE})
    at = upload(at, PAIRS, b"0-0 1-1 2-2 3-3 4-4 5-5\n0-0 0-1 1-2 1-3 2-4\n")
    assert_clean(at)
    assert not at.error and set(at.dataframe[0].value["pairs"]) == {2}
    assert any("hand.gold (2 pairs)" in plain(m.value) for m in at.markdown)
    at = upload(at, PAIRS, b"0-0 1-1\n0-0 1 x 2-2\n", "my <b>links</b>.txt")
    assert_clean(at)
    (error,) = [plain(e.value) for e in at.error]
    assert error.startswith("my <b>links</b>.txt, line 2: '1' is not a link")
    assert not at.dataframe
    at = upload(at, PAIRS, b"1-1 6-6\n1-1 3-5\n", "naacl.wa")  # counted from 1...
    assert "naacl.wa, line 1" in plain(at.error[0].value)  # ...read as from 0: out of range
    at.checkbox(key="al_one_indexed").check().run()
    assert not at.error and len(at.dataframe[0].value) == 22


def test_a_bpe_model_s_pieces_link_whole_words(studio_dirs, bpe_run):
    shutil.copytree(bpe_run, studio_dirs["runs"] / "bpe")
    at = run_page({"model": "runs/bpe/last.pt", "sentence": "we are eating apples ."})
    assert_clean(at)
    matrix = specs(at)[0]
    pieces = matrix["layout"]["xaxis"]["ticktext"]
    assert any(t.startswith("##") for t in pieces)  # the matrix shows the model's pieces
    lines = specs(at)[1]
    words = lines["layout"]["xaxis2"]["ticktext"]
    assert not any(w.startswith("##") for w in words) and len(words) < len(pieces)
    assert max(s for s, _ in pharaoh(at)) < len(words)  # links count words, not pieces
    assert at.dataframe


def test_a_slow_grid_shows_a_progress_bar_that_a_cache_hit_replays_harmlessly(
    studio_dirs, monkeypatch
):
    from pages.ui import progress
    from pages.ui.attention import cached_alignment

    shown = []

    class Eager(progress.LateProgress):
        """A progress bar from the first report on, as if the grid took more than a second."""

        def __init__(self):
            super().__init__(after=0.0)

        def __call__(self, fraction: float, what: str) -> None:
            super().__call__(fraction, what)
            shown.append(self.bar is not None)

    monkeypatch.setattr(cached_alignment, "LateProgress", Eager)
    cached_alignment.alignment_grid.clear()
    first = run_page()  # computed: the bar comes and goes inside the cached call
    assert_clean(first)
    assert shown and all(shown) and not first.get("progress")
    reports = len(shown)
    again = run_page()  # a cache hit replays what the call drew: a bar, then nothing
    assert_clean(again)
    assert len(shown) == reports  # not computed again
    assert len(again.dataframe[0].value) == 22 and not again.get("progress")


def test_the_best_reader_can_be_shown_in_the_view_above(studio_dirs):
    at = run_page({"kind": "encoder", "layer": "0", "head": "2"})
    best = best_reader(at)
    at.button(key="al_use_best").click().run()
    assert_clean(at)
    shows(at, best)
    assert query(at)["kind"] == "cross"


def test_a_link_with_a_huge_index_is_named_not_a_crash(studio_dirs):
    """Found by the audit: a 5,000-digit index raised a plain ValueError (int's digit limit)."""
    at = upload(run_page(), PAIRS, b"0-0\n" + b"1" * 5000 + b"-1\n", "huge.gold")
    assert_clean(at)
    (error,) = [plain(e.value) for e in at.error]
    assert error.startswith("huge.gold, line 2: '111") and "at most 6 digits" in error
    assert len(error) < 400


def test_an_uploaded_gold_set_is_scored_in_the_servers_one_heavy_slot(studio_dirs):
    """Found by the audit: each tab scored its own upload in parallel, outside the slot."""
    from pages.ui.attention.cached_alignment import alignment_grid
    from tests.helpers import heavy_slot_held

    alignment_grid.clear()
    with heavy_slot_held():  # another session's heavy job holds the slot
        at = upload(run_page(), PAIRS, b"0-0 1-1\n0-0\n", "busy.gold")
        assert_clean(at)
        assert any("one runs at a time" in w.value for w in at.warning) and not at.dataframe
    at.run()
    assert not at.warning and len(at.dataframe[0].value) == 22  # scored once the slot is free


def test_a_link_to_alignment_scores_the_shipped_set_in_the_heavy_slot(studio_dirs):
    """Found by the audit (issue 64): a link opening Alignment computed the shipped gold set's
    grid at once, outside the slot, concurrently across sessions (on a GPT-2-sized model a
    minute and 2 GB per prompt template); now it waits its turn and says so in one line."""
    from pages.ui.attention.cached_alignment import alignment_grid
    from tests.helpers import heavy_slot_held

    alignment_grid.clear()
    with heavy_slot_held():  # another session's heavy job holds the slot
        at = run_page({"sentence": SENTENCE})  # a URL that names no reader: opens on the best
        assert_clean(at)
        assert any("one runs at a time" in plain(w.value) for w in at.warning)
        assert not at.dataframe and not [i for i in at.info if "Opened on the reader" in i.value]
    at.run()  # the slot free: scored in it, kept for every session
    assert_clean(at)
    assert not at.warning and len(at.dataframe[0].value) == 22
    again = run_page({"sentence": SENTENCE})  # another session: the kept grid, no line
    assert_clean(again)
    shows(again, best_reader(again))


def test_an_upload_waits_in_line_and_is_scored_when_the_slot_frees(studio_dirs):
    """The fair queue: a page asking while another session holds the slot waits its turn
    and then computes, with nothing to click again."""
    import threading

    from pages.ui.attention.cached_alignment import alignment_grid
    from tests.helpers import heavy_slot_held

    alignment_grid.clear()
    with heavy_slot_held(wait_s=60) as queue:
        holder = next(iter(queue._running))
        threading.Timer(1.0, queue.leave, args=(holder,)).start()  # its job ends in 1 s
        at = upload(run_page(), PAIRS, b"0-0 1-1\n0-0\n", "turn.gold")
    assert_clean(at)
    assert not at.warning and len(at.dataframe[0].value) == 22


def test_an_uploaded_gold_set_past_the_scoring_bound_is_refused(studio_dirs, monkeypatch):
    from core.runs import budget

    monkeypatch.setattr(budget, "SCORING_CELLS", 100)
    at = upload(run_page(), PAIRS, b"0-0 1-1\n0-0\n", "big.gold")
    assert_clean(at)
    assert any("the server scores at most" in plain(e.value) for e in at.error)
    assert not at.dataframe


def test_the_held_out_gold_set_is_scored_or_says_how_to_get_it(studio_dirs, monkeypatch, tmp_path):
    from pages.ui.attention.gold_sets import held_out_set
    from tests.helpers import FRA_ENG

    held_out_set.clear()
    monkeypatch.setenv("FRA_ENG_ZIP", str(tmp_path / "absent.zip"))
    at = run_page()
    at.radio(key="al_gold").set_value("held-out").run()
    assert_clean(at)
    (info,) = [plain(i.value) for i in at.info]
    assert "FRA_ENG_ZIP" in info and not at.dataframe
    if not FRA_ENG.is_file():
        return
    monkeypatch.setenv("FRA_ENG_ZIP", str(FRA_ENG))
    held_out_set.clear()
    at.run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert set(table["pairs"]) == {130} and list(table["AER"]) == sorted(table["AER"])
    assert any("held-out Tatoeba pairs (130 pairs)" in plain(m.value) for m in at.markdown)
    from core.alignment.gold import GOLD_DIR

    ref = json.loads((GOLD_DIR / "tatoeba-test.reference.json").read_text(encoding="utf-8"))
    said = f"eflomal (grow-diag-final-and) scores AER {ref['aer']:.3f}"  # bench/alignment.py's
    assert any(said in plain(c.value) for c in at.caption)
    held_out_set.clear()


def test_readers_beyond_one_head_are_scored_and_a_reverse_model_combines(studio_dirs, reverse_run):
    shutil.copytree(reverse_run, studio_dirs["runs"] / "fr-en")
    at = run_page()
    assert_clean(at)
    assert not [d for d in at.dataframe if "kind" in d.value.columns]  # not before the button
    at.button(key="al_other_run").click().run()
    assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "kind" in d.value.columns]
    assert list(table["kind"]) == ["attribution", "states (SimAlign)", "states (SimAlign)"]
    assert all(0 <= a <= 1 for a in table["AER"])
    at.selectbox(key="al_reverse").set_value("runs/fr-en/last.pt").run()  # cached: no button
    at.button(key="al_other_run").click().run()
    assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "kind" in d.value.columns]
    both = table[table["kind"] == "both directions"]
    assert len(both) == 5 and both["reader"].iloc[0].startswith("forward (")
    grid_best = at.dataframe[0].value.iloc[0]["AER"]
    assert both["AER"].iloc[0] == grid_best  # the forward row is this model's best reader
    # issue 69, item 10: models of the same direction (the tiny run's), BERT and GPT-2 were
    # offered too: only models translating French→English are
    offered = [o.split(" · ")[0] for o in at.selectbox(key="al_reverse").options]
    assert sorted(offered) == ["(none)", "runs/fr-en/best.pt", "runs/fr-en/last.pt"]


def test_a_french_to_english_model_s_links_name_its_languages(studio_dirs, reverse_run):
    shutil.copytree(reverse_run, studio_dirs["runs"] / "fr-en")
    at = run_page({"model": "runs/fr-en/last.pt"})
    assert_clean(at)
    assert at.text_input(key="at_sentence").value == "je suis chez moi ."
    (matrix,) = [v for k, v in charts(at).items() if k.startswith("AW")]  # the best mode
    assert matrix["layout"]["xaxis"]["title"]["text"] == "French token (source)"
    assert matrix["layout"]["yaxis"]["title"]["text"] == "English token (target)"
    assert any("Pharaoh: French word – English word" in m.value for m in at.markdown)
    assert any("Each English token is linked to the French word" in c.value for c in at.caption)


def test_both_ways_links_what_row_and_column_choose_and_rescores_the_grid(studio_dirs):
    at = run_page({"sentence": SENTENCE, "layer": "1", "head": "2"})
    argmax_table = at.dataframe[0].value
    at.checkbox(key="al_both").check().run()
    assert_clean(at)
    matrix = charts(at)["AWO (attention when outputting)"]
    assert title(matrix).endswith("— layer 1, head 2, both ways")
    z = np.asarray(z_of(matrix), dtype=float)  # (T, S) the weights shown, no <eos>
    share = (z / z.sum(1, keepdims=True)) * (z / z.sum(0, keepdims=True))
    assert pharaoh(at) == {(s, t) for t, s in zip(*np.nonzero(share >= BOTH_WAYS))}
    table = at.dataframe[0].value
    (words,) = [plain(m.value) for m in at.markdown if "readers scored" in m.value]
    assert "read both ways" in words and f"AER {table.iloc[0]['AER']:.3f}" in words
    assert list(table["AER"]) != list(argmax_table["AER"])
    assert query(at)["both"] == "1"
    again = run_page(query(at))  # a reload or a shared link keeps the reading
    assert_clean(again)
    assert again.checkbox(key="al_both").value and pharaoh(again) == pharaoh(at)
    again.radio(key="at_section").set_value("maps").run()
    assert "both" not in query(again)  # it means something in this section only
