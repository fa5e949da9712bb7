"""The corpus: files, download, preprocessing, vocabularies, split and batches."""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile

import pytest

from core.corpus import source as corpus_source
from core.corpus.batches import batches, encode_pairs
from core.corpus.config import DataConfig
from core.corpus.source import (
    FRA_ENG_ENV,
    DataError,
    corpus_lines,
    corpus_pairs,
    download,
    parse_pairs,
    resolve_corpus,
)
from core.corpus.splits import Split, inspect_file, load_corpus, split_by_source
from core.corpus.text import preprocess, tokenize
from core.corpus.vocab import Vocab


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Go.", "go ."),
        ("Run!\u202f", "run !"),
        ("Courez\u202f!", "courez !"),
        ("Hi,\xa0Tom?", "hi , tom ?"),
        ("J'ai été là.", "j'ai été là ."),
        ("Wait !", "wait !"),
        ("J\u2019ai gagné.", "j'ai gagné ."),
    ],
)
def test_preprocess_like_d2l(raw, expected):
    """Lower case, no-break spaces, a space before , . ! ? — accents and apostrophes kept."""
    assert preprocess(raw) == expected


def test_parse_pairs_skips_and_counts_malformed_lines():
    """Lines without two non-empty columns are skipped and counted; extra columns ignored."""
    text = (
        "Go.\tVa !\tCC-BY 2.0 (France) Attribution\nno tab here\nsource only\t \n\nHi.\tSalut !\n"
    )
    pairs, skipped = parse_pairs(text)
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert skipped == 2


def test_no_usable_pairs_is_a_clear_error(tmp_path):
    """A file with no usable pair names the file and the expected format."""
    path = tmp_path / "bad.txt"
    path.write_text("just some text\nwithout tabs\n")
    with pytest.raises(DataError, match=r"bad\.txt.*no usable sentence pairs"):
        inspect_file(path)


def test_missing_file_is_a_clear_error(tmp_path):
    """A missing corpus path is named in the error."""
    with pytest.raises(DataError, match="not found"):
        load_corpus(DataConfig(source=str(tmp_path / "nope.tsv")))


def test_non_utf8_and_damaged_zip(tmp_path):
    """Undecodable text and a damaged zip give errors naming the file."""
    latin = tmp_path / "latin1.tsv"
    latin.write_bytes("été\tsummer\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_all(latin)
    damaged = tmp_path / "broken.zip"
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("fra-eng/fra.txt", "Go.\tVa !\n" * 200)
    damaged.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(DataError, match="broken.zip"):
        read_all(damaged)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("readme.md", "nothing")
    with pytest.raises(DataError, match="no .txt"):
        read_all(empty)


def test_zip_reading_picks_fra_txt(tmp_path):
    """From a d2l-style archive the pairs file is read, not _about.txt."""
    path = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fra-eng/_about.txt", "About\tthis file\n")
        zf.writestr("fra-eng/fra.txt", "Go.\tVa !\nHi.\tSalut !\n")
    assert list(corpus_pairs(path, {}))[1] == ("Hi.", "Salut !")


LIMIT = 10_000  # MAX_FILE_BYTES in the zip bomb tests (the zips are smaller on disk)


def bomb(path, size: int, declared: int | None = None):
    """A small zip whose fra.txt unpacks to ``size`` bytes; ``declared`` forges its file_size."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fra.txt", b"Go.\tVa !\n" * (size // 9))
    if declared is not None:  # the size fields of the local header and the central directory
        raw = bytearray(path.read_bytes())
        for at in (raw.index(b"PK\x03\x04") + 22, raw.rindex(b"PK\x01\x02") + 24):
            raw[at : at + 4] = struct.pack("<I", declared)
        path.write_bytes(raw)
    return path


@pytest.fixture
def unpacked(monkeypatch) -> list[int]:
    """MAX_FILE_BYTES is LIMIT; the list gets the size of every chunk read out of a zip member."""
    monkeypatch.setattr(corpus_source, "MAX_FILE_BYTES", LIMIT)
    sizes: list[int] = []
    read = zipfile.ZipExtFile.read

    def counting_read(self, n=-1):
        out = read(self, n)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting_read)
    return sizes


def test_zip_bomb_is_refused_by_its_declared_size(tmp_path, unpacked):
    """A member that says it unpacks to more than the limit is refused before any read."""
    path = bomb(tmp_path / "bomb.zip", 2_000_000)
    assert path.stat().st_size < LIMIT  # small on disk: only the unpacked size gives it away
    with pytest.raises(DataError, match=r"bomb\.zip:fra\.txt unpacks to more than"):
        read_all(path)
    assert sum(unpacked) == 0


def test_zip_bomb_with_a_forged_size_is_refused_without_unpacking_it(tmp_path, unpacked):
    """A member that claims a small size is never read beyond that claim (or the limit)."""
    path = bomb(tmp_path / "forged.zip", 2_000_000, declared=LIMIT // 2)
    with pytest.raises(DataError, match=r"forged\.zip is a damaged or unsupported zip archive"):
        read_all(path)
    assert sum(unpacked) <= LIMIT + 1


def test_reading_stops_once_past_the_limit(monkeypatch):
    """However a stream lies about its size, reading stops just past MAX_FILE_BYTES."""

    class Endless(io.RawIOBase):
        """Zeros for ever, counting what was read."""

        read_so_far = 0

        def read(self, n=-1):
            self.read_so_far += n
            return b"\0" * n

    monkeypatch.setattr(corpus_source, "MAX_FILE_BYTES", LIMIT)
    stream = Endless()
    capped = corpus_source._Capped(stream, "endless", corpus_source.UNPACKS)
    with pytest.raises(DataError, match="endless unpacks to more than"):
        while capped.read(4096):
            pass
    assert stream.read_so_far == LIMIT + 1


def test_download_verifies_checksum(tmp_path):
    """A download is checked against its SHA-1; progress is reported; a mismatch is refused."""
    source = tmp_path / "remote.zip"
    source.write_bytes(b"pretend archive" * 1000)
    sha1 = hashlib.sha1(source.read_bytes()).hexdigest()
    seen = []
    got = download(
        source.as_uri(), tmp_path / "cache" / "a.zip", sha1, lambda done, total: seen.append(done)
    )
    assert got.read_bytes() == source.read_bytes() and seen[-1] == 15000
    with pytest.raises(DataError, match="Checksum mismatch"):
        download(source.as_uri(), tmp_path / "cache" / "b.zip", "0" * 40)
    assert not (tmp_path / "cache" / "b.zip").exists()
    assert not list((tmp_path / "cache").glob("*.part"))


def test_no_network_is_a_clear_error(tmp_path):
    """An unreachable URL (a closed loopback port) says to check the network or use a file."""
    with pytest.raises(DataError, match="network"):
        download("http://127.0.0.1:9/fra-eng.zip", tmp_path / "x.zip", None)


def test_resolve_corpus_prefers_env_then_cache(tmp_path, monkeypatch):
    """fra-eng comes from FRA_ENG_ZIP if set, else from the cache, before any download."""
    local = tmp_path / "mine.zip"
    local.write_bytes(b"x")
    monkeypatch.setenv(FRA_ENG_ENV, str(local))
    assert resolve_corpus("fra-eng") == local
    monkeypatch.delenv(FRA_ENG_ENV)
    cached = tmp_path / "cache" / "fra-eng.zip"
    cached.parent.mkdir()
    cached.write_bytes(b"y")
    assert (
        resolve_corpus("fra-eng", cache_dir=tmp_path / "cache", url="http://127.0.0.1:9/") == cached
    )
    monkeypatch.setenv(FRA_ENG_ENV, str(tmp_path / "missing.zip"))
    with pytest.raises(DataError, match=FRA_ENG_ENV):
        resolve_corpus("fra-eng")


def test_vocab_specials_min_freq_and_max_size():
    """Specials first; rare words dropped; most frequent kept; unknowns map to <unk>."""
    sents = [["a", "b", "a", "c"], ["a", "b", "d"]]
    v = Vocab.build(sents, min_freq=2, max_size=100)
    assert v.itos == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"]
    assert Vocab.build(sents, min_freq=1, max_size=5).itos[-1] == "a"
    assert v.encode(["a", "zzz"]) == [4, Vocab.unk_id]
    assert v.decode([4, 5]) == ["a", "b"]


def test_split_keeps_every_translation_of_a_sentence_together():
    """All French translations of one English sentence land in one split, refs kept."""
    pairs = [(["s", str(i % 40)], ["t", str(i)]) for i in range(400)]
    cfg = DataConfig(val_fraction=0.1, test_fraction=0.1, split_seed=3)
    train, val, test = split_by_source(pairs, cfg)
    sources = [{tuple(s) for s, _ in part.pairs} for part in (train, val, test)]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])
    assert len(sources[1]) == len(sources[2]) == 4
    assert all(len(refs) == 10 for _, refs in val.groups())
    again = split_by_source(pairs, cfg)
    assert again[1].pairs == val.pairs


def test_head_split_is_d2l_first_rows():
    """The "head" split takes the first num_train rows, then num_val."""
    pairs = [([str(i)], [str(i)]) for i in range(10)]
    train, val, test = split_by_source(pairs, DataConfig(split="head", num_train=6, num_val=3))
    assert [p[0][0] for p in train.pairs] == list("012345")
    assert [p[0][0] for p in val.pairs] == list("678") and not test.pairs


@pytest.mark.parametrize(
    "bad",
    [
        dict(max_len=0),
        dict(min_freq=0),
        dict(max_vocab=3),
        dict(val_fraction=0.6, test_fraction=0.5),
    ],
)
def test_impossible_data_settings(bad, tiny_corpus):
    """Data settings that cannot work are refused with a reason."""
    with pytest.raises(DataError):
        load_corpus(DataConfig(source=str(tiny_corpus), **bad))


def test_load_tiny_corpus_summary(tiny_corpus):
    """The summary counts pairs, splits and vocabularies."""
    c = load_corpus(
        DataConfig(source=str(tiny_corpus), min_freq=1, val_fraction=0.2, test_fraction=0.1)
    )
    s = c.summary
    assert s["pairs_read"] == 30 and s["skipped_lines"] == 0
    assert s["train"] + s["val"] + s["test"] == 30 and s["val"] > 0
    assert c.src_vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]


def make_encoded(lengths):
    """Encoded pairs with given source/target lengths."""
    src_vocab = tgt_vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "w"])
    split = Split([(["w"] * n, ["w"] * n) for n in lengths])
    return encode_pairs(split, src_vocab, tgt_vocab)


def test_batches_pad_to_the_longest_in_batch_and_cover_every_example():
    """Every example once per epoch; each batch padded only to its own longest sentence."""
    lengths = [(i * 7) % 19 + 1 for i in range(300)]
    enc = make_encoded(lengths)
    seen, padded = 0, 0
    for src, tgt in batches(enc, 32, shuffle=True, seed=1):
        assert tgt[:, 0].eq(Vocab.bos_id).all()
        real = (src != 0).sum(1)
        assert src.size(1) == int(real.max())
        seen += src.size(0)
        padded += src.numel()
    assert seen == 300
    random_padded = sum(s.numel() for s, _ in batches(enc, 32, shuffle=True, bucket=False))
    assert padded < 0.8 * random_padded


def test_fixed_length_batches_like_d2l():
    """fixed_len pads (and truncates) every batch to num_steps, as d2l does."""
    enc = make_encoded([3, 12, 5])
    for src, tgt in batches(enc, 2, shuffle=False, fixed_len=9):
        assert src.size(1) == 9 and tgt.size(1) == 10


def test_tokenize_matches_preprocess():
    """tokenize = preprocess + split."""
    assert tokenize("I'm home.") == ["i'm", "home", "."]


def test_real_fra_eng(fra_eng, monkeypatch):
    """The shared fra-eng.zip: 167,130 pairs, none skipped, split without overlap."""
    monkeypatch.setenv(FRA_ENG_ENV, str(fra_eng))
    c = load_corpus(DataConfig(source="fra-eng", max_len=10, max_vocab=5000))
    assert c.summary["pairs_read"] == 167130 and c.summary["skipped_lines"] == 0
    val_src = {tuple(s) for s, _ in c.val.pairs}
    assert val_src.isdisjoint(tuple(s) for s, _ in c.train.pairs)
    assert len(c.src_vocab) == len(c.tgt_vocab) == 5000
    assert any(len(refs) > 1 for _, refs in c.val.groups())


def read_all(path) -> list:
    """Every line of a corpus file, as the loaders stream them (DataError if unreadable)."""
    return list(corpus_lines(path))
