"""The app's disk caches as the pages read them: what tells a cache kept in memory for every
session that the folder holds new results."""

from __future__ import annotations

from core.runs import disk_cache


def test_the_digest_of_stored_keys_changes_on_a_new_result_not_on_a_hit(tmp_path):
    """What the "Over training" view keys its server-wide cache by: another session's (or the
    command's) measurement is seen, a page's own reads do not make it read again."""
    folder = tmp_path / ".trajectories"
    empty = disk_cache.stored_keys(folder)  # no folder yet
    disk_cache.write_cached(folder, "a", {"x": 1})
    one = disk_cache.stored_keys(folder)
    assert one != empty
    assert disk_cache.read_cached(folder, "a") and disk_cache.stored_keys(folder) == one
    (folder / "b.json.1.2.tmp").write_text("{}")  # a write under way is no result yet
    assert disk_cache.stored_keys(folder) == one
    disk_cache.write_cached(folder, "b", {"x": 2})
    assert disk_cache.stored_keys(folder) not in (one, empty)
