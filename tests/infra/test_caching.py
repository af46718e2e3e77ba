"""The one content-addressed store: keys that stay the same across versions (so that caches
already on disk keep working), entries written whole or not at all, namespaces kept apart."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from reprokit.infra.caching import Store, cache_root, file_digest


def test_a_key_is_the_hash_of_its_parts_in_sorted_json():
    """Pinned: a key that changed would make every cache already on disk miss."""
    one = {"b": [1, 2], "a": "x"}
    assert Store.key(one) == "5125d018f84d57c49a8d3c2cfa6063d23cc3f4cd7ff13f4fdedfa2c1d3162f30"
    assert Store.key(one) == hashlib.sha256(b'{"a": "x", "b": [1, 2]}').hexdigest()
    assert Store.key({"a": "x", "b": [1, 2]}) == Store.key(one)  # the order of a dict's keys
    assert Store.key("x", 1) == Store.key(["x", 1]) != Store.key([1, "x"])  # that of parts
    assert Store.key({"a": "y", "b": [1, 2]}) != Store.key(one)


def test_file_digests_as_key_parts(tmp_path):
    (tmp_path / "a").write_bytes(b"tensors")
    assert file_digest(tmp_path / "a") == hashlib.sha256(b"tensors").hexdigest()
    assert file_digest(tmp_path / "missing") is None
    before = Store.key({"a": file_digest(tmp_path / "a")})
    (tmp_path / "a").write_bytes(b"other tensors")
    assert Store.key({"a": file_digest(tmp_path / "a")}) != before


def test_json_entries_round_trip_in_their_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path))
    results, minimize = Store("results"), Store("minimize")
    key = Store.key("same key")
    assert results.get_json(key) is None
    path = results.put_json(key, {"inf": "inf", "n": [1]})
    assert path == cache_root() / "results" / f"{key}.json"
    assert results.get_json(key) == {"inf": "inf", "n": [1]}
    assert minimize.get_json(key) is None  # namespaces apart
    minimize.put_json(key, ["other"])
    assert (results.get_json(key), minimize.get_json(key)) == ({"inf": "inf", "n": [1]}, ["other"])


def test_a_broken_entry_reads_as_none(tmp_path):
    store = Store("comparisons", root=tmp_path)
    store.folder.mkdir()
    store.path("k").write_text('{"half": ')
    assert store.get_json("k") is None


def test_a_put_interrupted_at_the_rename_leaves_the_old_entry_whole(tmp_path, monkeypatch):
    store = Store("environments", root=tmp_path)
    store.put_json("k", {"version": 1})

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.put_json("k", {"version": 2})
    assert store.get_json("k") == {"version": 1}
    assert os.listdir(store.folder) == ["k.json"]  # no temporary file left beside it


def test_a_folder_entry_is_made_whole_or_not_at_all(tmp_path):
    store = Store("results", root=tmp_path)

    def fill(folder):
        (folder / "stage").mkdir()
        (folder / "record.json").write_text(json.dumps({"run": "first"}))

    entry = store.put_folder("k", fill)
    assert entry == tmp_path / "results" / "k" and store.get_folder("k") == entry

    def second(folder):
        (folder / "record.json").write_text(json.dumps({"run": "second"}))

    assert store.put_folder("k", second) is None  # the first writer's entry stays
    assert json.loads((entry / "record.json").read_text()) == {"run": "first"}

    def disk_full(folder):
        (folder / "part").write_text("half")
        raise OSError(28, "No space left on device")

    def interrupted(folder):
        (folder / "part").write_text("half")
        raise KeyboardInterrupt

    assert store.put_folder("full", disk_full) is None
    with pytest.raises(KeyboardInterrupt):
        store.put_folder("stopped", interrupted)
    assert sorted(os.listdir(store.folder)) == ["k"]  # no half entry, no temporary folder
    assert store.get_folder("full") is None


def test_a_folder_entry_can_be_judged_unusable(tmp_path):
    store = Store("envs", root=tmp_path)
    (store.folder / "k").mkdir(parents=True)
    assert store.get_folder("k") == store.folder / "k"
    assert store.get_folder("k", ready=lambda folder: (folder / "marker").is_file()) is None


def test_writers_of_one_entry_take_turns(tmp_path):
    store = Store("envs", root=tmp_path)
    with store.lock("k"):
        assert (store.folder / "k.lock").exists()
        with pytest.raises(TimeoutError):  # filelock's Timeout is a TimeoutError
            store.lock("k").acquire(timeout=0)
    with store.lock("k").acquire(timeout=0):
        pass  # free again


def test_the_root_is_read_when_a_store_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "one"))
    assert Store("envs").folder == tmp_path / "one" / "envs"
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "two"))
    assert Store("envs").folder == tmp_path / "two" / "envs"
