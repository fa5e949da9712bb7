"""Gold alignments and AER (core.alignment.gold, core.alignment.aer): formats, errors, scores."""

from __future__ import annotations

import pytest

from core.alignment import aer
from core.alignment.gold import (
    STUDIO_LINKS,
    GoldError,
    GoldLinks,
    check_gold,
    parse_link_line,
    read_links,
    read_pairs,
    studio_gold,
    tokenized_like_ours,
    write_links,
)
from core.corpus.text import tokenize


def written(tmp_path, text: str, name: str = "f.txt"):
    """A file holding text."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- AER ---------------------------------------------------------------------------------


def test_aer_by_hand():
    gold = [
        GoldLinks({(0, 0), (1, 1)}, {(1, 2)}),  # S = {00, 11}, P = {00, 11, 12}
        GoldLinks({(0, 0)}, {(1, 0)}),  # S = {00}, P = {00, 10}
    ]
    predicted = [{(0, 0), (1, 2), (2, 2)}, {(0, 0), (1, 0)}]
    # |A| = 3 + 2 = 5, |S| = 2 + 1 = 3, |P| = 3 + 2 = 5
    # |A∩S| = 1 (00) + 1 (00) = 2; |A∩P| = 2 (00, 12) + 2 (00, 10) = 4
    # precision = 4/5 = 0.8, recall = 2/3, AER = 1 - (2 + 4) / (5 + 3) = 1 - 6/8 = 0.25
    s = aer.score(predicted, gold)
    assert s.precision == pytest.approx(0.8)
    assert s.recall == pytest.approx(2 / 3)
    assert s.aer == pytest.approx(0.25)
    assert (s.pairs, s.predicted_links, s.sure_links, s.possible_links) == (2, 5, 3, 5)


def test_aer_is_micro_averaged_not_a_mean_of_pairs():
    gold = [GoldLinks({(0, 0)}), GoldLinks({(k, k) for k in range(9)})]
    s = aer.score([{(0, 0)}, set()], gold)  # pair means would give recall 0.5
    assert s.recall == pytest.approx(1 / 10)


@pytest.mark.parametrize(
    "predicted, expected",
    [
        ([{(0, 0), (1, 1)}], (0.0, 1.0, 1.0)),  # A = S
        ([{(0, 0), (1, 1), (2, 1)}], (0.0, 1.0, 1.0)),  # A = P: possible links cost nothing
        ([{(0, 0)}], (1 - 2 / 3, 1.0, 0.5)),  # half the sure links
        ([{(5, 5)}], (1.0, 0.0, 0.0)),  # all wrong
        ([set()], (1.0, 0.0, 0.0)),  # nothing predicted: no credit, no division error
    ],
)
def test_aer_edges(predicted, expected):
    s = aer.score(predicted, [GoldLinks({(0, 0), (1, 1)}, {(2, 1)})])
    assert (s.aer, s.precision, s.recall) == pytest.approx(expected)


def test_aer_without_sure_links():
    s = aer.score([{(0, 0)}], [GoldLinks(set(), {(0, 0)})])  # A ⊆ P, S empty
    assert (s.aer, s.precision, s.recall) == pytest.approx((0.0, 1.0, 0.0))
    s = aer.score([set()], [GoldLinks()])  # nothing at all: worst, never 0/0
    assert (s.aer, s.precision, s.recall, s.pairs) == (1.0, 0.0, 0.0, 1)
    assert aer.score([], []).aer == 1.0


def test_aer_needs_one_prediction_per_pair():
    with pytest.raises(ValueError, match="2 predicted alignments for 1 gold pairs"):
        aer.score([set(), set()], [GoldLinks()])


# --- symmetrisation ----------------------------------------------------------------------


def test_intersection_and_union():
    fwd, bwd = {(0, 0), (1, 1)}, {(0, 0), (1, 2)}
    assert aer.intersect(fwd, bwd) == {(0, 0)}
    assert aer.union(fwd, bwd) == {(0, 0), (1, 1), (1, 2)}


def test_grow_diag_final_and_worked_example():
    fwd = {(0, 0), (1, 1), (0, 1), (3, 3)}
    bwd = {(0, 0), (1, 1), (1, 2), (3, 2)}
    # start: intersection {00, 11}; union adds 01, 33, 12, 32
    # grow: 01 is next to 00 and 11 but both its words are aligned -> no;
    #       12 is next to 11 and French word 2 is unaligned -> yes
    # final-and(forward): 33 joins two unaligned words -> yes
    # final-and(backward): 32 -> no, English word 3 and French word 2 are aligned now
    assert aer.grow_diag_final_and(fwd, bwd, 4, 4) == {(0, 0), (1, 1), (1, 2), (3, 3)}


def test_grow_diag_takes_diagonal_neighbours():
    assert aer.grow_diag_final_and({(0, 0), (1, 1)}, {(0, 0)}, 2, 2) == {(0, 0), (1, 1)}


def test_grow_diag_final_and_agrees_when_directions_agree():
    links = {(0, 1), (1, 0), (2, 2)}
    assert aer.grow_diag_final_and(links, links, 3, 3) == links
    assert aer.grow_diag_final_and(set(), set(), 3, 3) == set()


# --- reading and writing -----------------------------------------------------------------


def test_both_kinds_of_link_are_read():
    g = parse_link_line("0-0 1p2 2-1")
    assert g.sure == {(0, 0), (2, 1)}
    assert g.possible == {(0, 0), (1, 2), (2, 1)}  # P includes S
    assert parse_link_line("") == GoldLinks()


def test_one_indexed_files(tmp_path):
    path = written(tmp_path, "2-2 1-1\n3p1 2p1 4-2 1p1 \n")  # the NAACL / awesome-align style
    first, second = read_links(path, one_indexed=True)
    assert first.sure == {(1, 1), (0, 0)}
    assert second.sure == {(3, 1)} and second.possible == {(2, 0), (1, 0), (3, 1), (0, 0)}
    with pytest.raises(GoldError, match="line 1"):
        read_links(written(tmp_path, "0-0 1-1\n"), one_indexed=True)


def test_pairs_are_read(tmp_path):
    path = written(tmp_path, "hello . ||| bonjour .\ni'm home .   |||   je suis chez moi .  \n")
    assert read_pairs(path) == [
        (["hello", "."], ["bonjour", "."]),
        (["i'm", "home", "."], ["je", "suis", "chez", "moi", "."]),
    ]


def test_links_round_trip_through_pharaoh_text():
    g = GoldLinks({(2, 1), (0, 0)}, {(1, 2), (0, 0)})
    assert write_links(g) == "0-0 1p2 2-1"
    assert parse_link_line(write_links(g)) == g
    assert write_links({(1, 0), (0, 1)}) == "0-1 1-0"  # a plain set: every link sure
    assert write_links(set()) == ""


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("a ||| b\nno separator here\n", 2, "exactly one '|||'"),
        ("a ||| b ||| c\n", 1, "found 2"),
        ("a b ||| c\n   ||| d\n", 2, "English side is empty"),
        ("a ||| b\nc |||\n", 2, "French side is empty"),
        ("a ||| b\n\n", 2, "exactly one"),  # a blank line inside the file
    ],
)
def test_bad_pair_files_name_file_and_line(tmp_path, text, line, words):
    path = written(tmp_path, text, "pairs.src-tgt")
    with pytest.raises(GoldError, match=f"pairs.src-tgt, line {line}: .*{words}"):
        read_pairs(path)


@pytest.mark.parametrize(
    "text, line",
    [
        ("0-0\n1-1 2\n", 2),  # ragged: a bare number
        ("0-0 1-\n", 1),
        ("0-0\n0-0\n1x2\n", 3),
        ("0-0 1-2-3\n", 1),
        ("0--1\n", 1),
        ("1 2 3 S\n", 1),  # one link a line, as the original shared task: not this format
    ],
)
def test_bad_link_files_name_file_and_line(tmp_path, text, line):
    path = written(tmp_path, text, "pairs.gold")
    with pytest.raises(GoldError, match=f"pairs.gold, line {line}: .*not a link"):
        read_links(path)


def test_a_file_that_is_not_utf8_is_a_gold_error(tmp_path):
    path = tmp_path / "latin1.gold"
    path.write_bytes("à ||| à\n".encode("latin-1"))
    with pytest.raises(GoldError, match="latin1.gold is not UTF-8"):
        read_pairs(path)


def test_check_gold_names_the_line_of_an_out_of_range_link():
    pairs = [(["a", "b"], ["x"]), (["a"], ["x", "y"])]
    check_gold(pairs, [GoldLinks({(1, 0)}), GoldLinks({(0, 1)})])
    with pytest.raises(GoldError, match="line 2 .*link 0-2 .* 1 English and 2 French tokens"):
        check_gold(pairs, [GoldLinks({(1, 0)}), GoldLinks(set(), {(0, 2)})])
    with pytest.raises(GoldError, match="line 1 .*link 2-0"):
        check_gold(pairs, [GoldLinks({(2, 0)}), GoldLinks()])


@pytest.mark.parametrize("n_links, words", [(1, "line 2 has no links"), (3, "line 3 has no pair")])
def test_check_gold_names_the_line_when_counts_differ(n_links, words):
    pairs = [(["a"], ["x"]), (["b"], ["y"])]
    with pytest.raises(GoldError, match=f"2 pairs but {n_links} lines of links: {words}"):
        check_gold(pairs, [GoldLinks({(0, 0)})] * n_links)


def test_gold_error_is_a_value_error():
    assert issubclass(GoldError, ValueError)


def test_tokenized_like_ours():
    assert tokenized_like_ours(["j'ai", "faim", "."])
    assert not tokenized_like_ours(["Mr.", "Speaker", ","])  # Hansards: capitals, "mr ."
    assert not tokenized_like_ours(["j'ai", "faim."])


# --- the shipped gold set ----------------------------------------------------------------


@pytest.fixture(scope="module")
def studio():
    return studio_gold()


def test_studio_gold_loads_and_is_big_enough(studio):
    pairs, links = studio
    assert len(pairs) == len(links) >= 64
    check_gold(pairs, links)


def test_studio_sentences_are_what_our_tokenizer_makes(studio):
    for src, tgt in studio[0]:
        assert tokenize(" ".join(src)) == src and tokenize(" ".join(tgt)) == tgt


def test_studio_links_are_in_range_and_every_pair_has_a_sure_link(studio):
    for (src, tgt), gold in zip(*studio):
        assert gold.sure, (src, tgt)
        assert gold.sure <= gold.possible
        assert all(i < len(src) and j < len(tgt) for i, j in gold.possible), (src, tgt)


def test_studio_links_file_is_what_write_links_writes(studio):
    lines = STUDIO_LINKS.read_text(encoding="utf-8").splitlines()
    assert lines == [write_links(g) for g in studio[1]]


def test_studio_punctuation_links_to_punctuation(studio):
    for (src, tgt), gold in zip(*studio):
        for i, j in gold.possible:
            if src[i] in ".,!?" or tgt[j] in ".,!?":
                assert src[i] == tgt[j] and (i, j) in gold.sure, (src, tgt, i, j)
