"""Property-based tests (hypothesis) of every parser of outside input: whatever comes in, the
answer is a valid value or a clear error of the parser's own kind, never another exception.

Outside input: URL query strings (the view state), settings and request.json, the head-removal
spec, the token picker, corpus files and uploads (any bytes, any encoding, huge lines), file
paths a user typed, run and model names, checkpoint metadata and stored BPE tokenizers, and
the results files of ``core.attribute --input`` loaded back on the Attention page.
"""

from __future__ import annotations

import copy
import json
import string

import pyarrow as pa
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.attention import token_pick
from core.attention.ablation import HeadSpecError, heads_of, parse_heads
from core.attention.kinds import KINDS
from core.attribution.file_mode import FileModeError, aggregate, attribute_file, read_records
from core.corpus import user_files
from core.corpus.bpe import vocab_from_meta
from core.corpus.source import DataError, corpus_pairs
from core.corpus.splits import inspect_file
from core.corpus.vocab import SPECIALS
from core.model.checkpoints import FORMAT, CheckpointError, read_metadata
from core.model.config import ModelConfig
from core.model.parts import ALPHAS, BEAM_SIZES, MAX_LENS
from core.runs import jobs
from core.runs.catalogue import ModelError, validate_name
from core.runs.run_dir import RunDir, RunError, write_json
from core.training import settings as run_settings
from core.training.presets import PRESETS
from pages.ui.attention.sections import SECTION_KEYS, known_section
from pages.ui.view_state import ViewState

FAST = settings(max_examples=500, deadline=None, derandomize=True)
SLOW = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
NASTY = st.one_of(  # what a hand-edited URL, form or JSON file may hold
    TEXT,
    st.sampled_from(["", "0", "-1", "1e309", "nan", "inf", "²", "٣", "9" * 5000, "\x00", "../"]),
    st.from_regex(r"-?[0-9]{1,30}(\.[0-9]{0,5})?", fullmatch=True),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
FIELDS = sorted({name for group in PRESETS["small"].values() for name in group})


@FAST
@given(
    st.dictionaries(
        st.sampled_from([f.name for f in ViewState.__dataclass_fields__.values()]) | TEXT,
        NASTY,
        max_size=8,
    )
)
def test_any_query_string_gives_a_view_inside_every_widgets_range(params):
    state = ViewState.from_query(params)
    assert BEAM_SIZES[0] <= state.beam <= BEAM_SIZES[1]
    assert ALPHAS[0] <= state.alpha <= ALPHAS[1]
    assert MAX_LENS[0] <= state.max_len <= MAX_LENS[1]
    assert state.kind in KINDS and known_section(state) in SECTION_KEYS and state.layer >= 0
    assert state.head.isascii() and (
        state.head.isdigit() or state.head in ("mean", "max", "rollout")
    )
    if state.section != "playback":  # the output step travels with the playback only
        state.step = 0
    if state.section != "attribution":  # the method travels with the attribution only
        state.method = ViewState.method
        state.contrast_step, state.contrast_word = ViewState.contrast_step, ViewState.contrast_word
        state.contrast_method = ViewState.contrast_method
    if state.section != "alignment":  # the alignment mode travels with the alignment only
        state.align = ViewState.align
    if state.section != "training":  # the training steps travel with "Over training" only
        state.train_step, state.diff_from = ViewState.train_step, ViewState.diff_from
    if state.section != "inside":  # the query token and lines mode travel with it only
        state.query, state.lines_all = ViewState.query, ViewState.lines_all
    if state.section != "lens":  # the logit lens's colouring travels with it only
        state.lens = ViewState.lens
    if state.section != "patch":  # the corrupted sentence travels with the patching only
        for name in ["corrupt", *(f for f in vars(ViewState()) if f.startswith("patch_"))]:
            setattr(state, name, getattr(ViewState, name))
    if state.section != "project":  # the projection's settings travel with it only
        for name in [f for f in vars(ViewState()) if f.startswith("space_")]:
            setattr(state, name, getattr(ViewState, name))
    assert ViewState.from_query(state.to_query()) == state  # what it writes, it reads back


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["data", "model", "train", "other"]) | TEXT,
        st.dictionaries(st.sampled_from(FIELDS) | TEXT, JSON | NASTY, max_size=5) | JSON,
        max_size=4,
    )
)
def test_any_settings_give_reasons_or_pass(overrides):
    """The form's and request.json's settings: a list of reasons, never an exception."""
    merged = {g: dict(PRESETS["d2l"].get(g, {})) for g in ("data", "model", "train")}
    for group, values in overrides.items():
        if group in merged and isinstance(values, dict):
            merged[group].update(values)
        elif group in merged:
            merged[group] = values
    problems = run_settings.config_problems(merged)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)


@SLOW
@given(JSON)
def test_any_request_json_starts_a_run_or_says_why(tmp_path_factory, request_json):
    """request.json as the trainer reads it: valid settings, or DataError / ValueError."""
    from core.runs.training_run import new_run_configs
    from core.train import build_parser

    rd = RunDir(tmp_path_factory.mktemp("run"))
    write_json(rd.request, request_json)
    args = build_parser().parse_args(["--out", str(rd.path), "--request"])
    try:
        configs = new_run_configs(rd, args)
    except (DataError, ValueError):
        return
    assert run_settings.config_problems(configs) == []


@FAST
@given(NASTY | st.text(alphabet=string.printable, max_size=60))
def test_any_head_spec_is_heads_of_this_model_or_a_head_spec_error(text):
    cfg = ModelConfig(src_vocab_size=8, tgt_vocab_size=8, num_heads=4)
    try:
        heads = heads_of(text, cfg)
    except HeadSpecError as e:
        assert str(e)
        return
    assert heads == parse_heads(",".join(h.spec for h in heads))
    assert all(0 <= h.layer < 2 and 0 <= h.head < 4 for h in heads)


@FAST
@given(NASTY)
def test_any_token_pick_is_a_position_or_none(text):
    picked = token_pick.parse_pick(text)
    assert picked is None or (picked[0] in ("query", "key") and picked[1] >= 0)


@SLOW
@given(
    st.binary(max_size=3000)
    | st.builds(lambda t: t.encode("utf-16"), TEXT)
    | st.builds(lambda n: b"x" * n + b"\tlong\n", st.integers(0, 30_000))
)
def test_any_corpus_bytes_are_counted_or_refused_clearly(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("corpus") / "upload.tsv"
    path.write_bytes(data)
    try:
        info = inspect_file(path)
    except DataError as e:
        assert str(e)
        return
    counts: dict = {}
    assert sum(1 for _ in corpus_pairs(path, counts)) == info["usable"] > 0


@SLOW
@given(TEXT | NASTY, st.binary(max_size=500))
def test_any_upload_is_staged_inside_the_uploads_folder_or_refused(jobs_env, name, data):
    try:
        path = user_files.stage_upload(name, data)
    except DataError:
        return
    assert path.parent.parent.resolve() == user_files.uploads_root().resolve()
    assert path.name == user_files.safe_file_name(name)  # the user's name, made safe
    assert path.read_bytes() == data


@FAST
@given(NASTY | st.sampled_from(["/etc/passwd", "~/x", "../../../etc", "tiny.tsv", "a\x00b"]))
def test_any_typed_path_is_inside_the_apps_folders_or_refused(path):
    try:
        resolved = user_files.allowed_path(path)
    except DataError:
        return
    folders = [f.resolve() for f in user_files.corpus_folders()]
    assert any(resolved.is_relative_to(f) for f in folders)


@SLOW
@given(NASTY | st.text(max_size=80))
def test_any_run_or_model_name_is_kept_safely_or_refused(jobs_env, name):
    rd = RunDir(jobs_env["runs"] / "20260101-000000-small")
    rd.create()
    try:
        kept = jobs.rename_run(rd.name, name)
    except RunError:
        return
    assert len(kept) <= jobs.MAX_NAME_CHARS and json.loads(rd.job.read_text())["name"] == kept
    try:
        file_name = validate_name(name)
    except ModelError:
        return
    assert "/" not in file_name and ".." not in file_name.replace(".pt", "")


@SLOW
@given(
    st.dictionaries(
        st.sampled_from(
            ["src_vocab", "tgt_vocab", "tokenizers", "model_config", "data_config", "state"]
        )
        | TEXT,
        JSON,
        max_size=6,
    )
)
def test_any_checkpoint_metadata_is_read_or_refused_clearly(tmp_path_factory, meta):
    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    torch.save({"format": FORMAT, **meta, "state_dict": {}}, path)
    try:
        read = read_metadata(path)
    except CheckpointError as e:
        assert str(e)
        return
    assert "state_dict" not in read


@FAST
@given(st.lists(TEXT, max_size=6), st.none() | TEXT | st.sampled_from(["{}", '{"model": 1}']))
def test_any_stored_vocabulary_and_tokenizer_rebuild_or_raise_value_error(words, tokenizer):
    try:
        vocab = vocab_from_meta(SPECIALS + words, tokenizer)
    except ValueError as e:
        assert str(e)
        return
    assert vocab.itos[: len(SPECIALS)] == SPECIALS


@pytest.mark.parametrize("junk", [b"", b"PK\x03\x04junk", b"\x80\x02}q\x00.", b"x" * 1000])
def test_any_checkpoint_bytes_are_refused_clearly(tmp_path, junk):
    path = tmp_path / "junk.pt"
    path.write_bytes(junk)
    with pytest.raises(CheckpointError):
        read_metadata(path)


@SLOW
@given(
    TEXT | NASTY | st.text(max_size=400),
    st.dictionaries(st.sampled_from(["beam", "alpha", "max_len"]), NASTY, max_size=3),
)
def test_any_typed_sentence_is_translated_or_refused_in_words(tiny_model, sentence, params):
    """The Translate page's box and URL: a Translation, or a TranslationError to show."""
    from core.model.checked_translation import translate_sentence
    from core.model.parts import TranslationError

    state = ViewState.from_query(params)
    try:
        t = translate_sentence(tiny_model, sentence, state.settings())
    except TranslationError as e:
        assert str(e)
        return
    assert t.output_tokens and len(t.output_tokens) <= state.max_len


@FAST
@given(
    st.sampled_from([*PRESETS, "nope", ""]),
    st.dictionaries(TEXT | st.sampled_from(["data", "model", "train"]), JSON, max_size=3),
)
def test_any_form_submission_gives_reasons_or_none(preset, overrides):
    """What the Train form sends to validate_settings: reasons in words, or none."""
    problems = run_settings.validate_settings(preset, overrides)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)


REMOVED = object()  # a place taken out of a record
JUNK = JSON | st.sampled_from(
    [float("nan"), float("inf"), 10**400, 1e308, -1e308, 10**30, [], {}, "", [[[]]], [["x"]]]
).map(copy.deepcopy)  # a copy: a later mutation may change what it was given
RAW_LINES = st.binary(max_size=60) | st.sampled_from(
    [b"[" * 50_000, b'{"line": ' + b"9" * 5000 + b"}", b"NaN", b'{"line": 1e999}', b"\xff{"]
)


def mutated(value, data, inside: bool = False):
    """``value`` with one place in it (drawn; ``inside``: not itself) replaced by junk,
    removed, emptied or grown."""
    if isinstance(value, dict | list) and value and (inside or data.draw(st.booleans())):
        key = data.draw(
            st.sampled_from(list(value) if isinstance(value, dict) else range(len(value)))
        )
        inner = mutated(value[key], data)
        if inner is REMOVED:
            del value[key]
        else:
            value[key] = inner
        return value
    how = data.draw(st.sampled_from(["junk", "remove", "empty", "grow"]))
    if how == "remove":
        return REMOVED
    if how == "empty" and isinstance(value, dict | list | str):
        return type(value)()
    if how == "grow" and isinstance(value, list):
        return [*value, data.draw(JUNK)]
    if how == "grow" and isinstance(value, dict):
        return value | {data.draw(TEXT): data.draw(JUNK)}
    return data.draw(JUNK)


@pytest.fixture(scope="module")
def written_records(tiny_model, tmp_path_factory) -> list[dict]:
    """What the real file mode writes: explained lines (grad-input: raw scores, a contrast,
    a forced target) and a line it could not explain."""
    pairs = tmp_path_factory.mktemp("file-mode") / "pairs.tsv"
    pairs.write_text("i'm home .\ni'm cold .\tj'ai froid .\tje suis froid .\nhi .\ta\ta\n")
    attribute_file(tiny_model, pairs, pairs.with_name("out.jsonl"), "grad-input")
    return [json.loads(x) for x in pairs.with_name("out.jsonl").read_text().splitlines()]


@settings(SLOW, max_examples=400)
@given(st.data())
def test_any_results_file_is_summed_up_or_refused_clearly(written_records, data):
    """A results file uploaded on the Attention page: its tables, or a FileModeError in one
    line; never another exception (the page would show a traceback)."""
    records = json.loads(json.dumps(written_records))  # a deep copy
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(0, len(records) - 1))
        records[k] = mutated(records[k], data, inside=True)  # whole lines: RAW_LINES
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in records]
    if data.draw(st.booleans()):
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(RAW_LINES))
    try:
        result = aggregate(read_records(b"\n".join(lines) + b"\n"))
    except FileModeError as e:
        assert str(e) and "\n" not in str(e)
        return
    for table in (result.by_position, result.by_token, result.per_sentence):
        numbers = table.select_dtypes("number").to_numpy(dtype=float, na_value=0.0)
        assert numbers.size == 0 or abs(numbers).max() < float("inf")
        pa.Table.from_pandas(table)  # what st.dataframe sends to the browser
