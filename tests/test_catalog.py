"""The catalog: every source converts, validates against its scale, fetches with checksums; splits."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from judgetune import datasets
from judgetune.datasets import read_examples, split_by_group, split_examples, write_examples
from judgetune.datasets._fetch import FetchError, manifest_entries
from judgetune.errors import DataNotFoundError, JudgetuneError

EXPECTED = {  # name -> (examples, labeled, groups, histogram)
    "linkage-antique": (10186, 10186, 500, {"1": 1803, "2": 3225, "3": 2266, "4": 2892}),
    "linkage-trec-dl-nf": (5541, 5541, 55, {"0": 2642, "1": 1372, "2": 998, "3": 529}),
    "linkage-webglm": (300, 300, 100, {"1": 94, "2": 105, "3": 101}),
    "sts2012-msrpar": (1500, 1500, 0, None),
    "stsb": (8628, 8628, 0, None),
    "ragchecker": (560, 560, 280, {"-2": 52, "-1": 153, "0": 170, "1": 139, "2": 46}),
    "summac-summeval": (100, 100, 100, {"0": 37, "1": 63}),
    "summac-factcc": (311, 311, 310, {"0": 37, "1": 274}),
    "summac-polytope": (634, 634, 178, {"0": 592, "1": 42}),
    "summac-xsumfaith": (485, 485, 485, {"0": 435, "1": 50}),
    "llmbar-natural": (100, 100, 0, {"-1": 42, "1": 58}),
    "llmbar-adversarial": (319, 319, 0, {"-1": 164, "1": 155}),
    "nrp-clef-ehealth": (650, 250, 50, {"0": 33, "1": 74, "2": 143}),
}


def test_catalog_lists_every_required_source():
    assert set(datasets.CATALOG) == set(EXPECTED)
    for source in datasets.CATALOG.values():
        assert source.location.startswith("https://") and source.license and source.citation


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_source_converts_and_passes_the_reader(name, data_root, tmp_path):
    examples = datasets.load(name, root=data_root)
    info = datasets.summary(name, examples)
    count, labeled, groups, histogram = EXPECTED[name]
    assert (info["examples"], info["labeled"], info["groups"]) == (count, labeled, groups)
    if histogram is not None:
        assert info["histogram"] == histogram
    assert sum(info["histogram"].values()) == labeled
    # written out and read back through the validating reader, on the source's own scale
    path = tmp_path / f"{name}.jsonl"
    write_examples(path, examples)
    assert read_examples(path, scale=datasets.get_source(name).scale, require_label=labeled == count) == examples


def test_source_specific_conversions(data_root):
    webglm = datasets.load("linkage-webglm", root=data_root)
    first = webglm[0]
    assert [r.grade for r in first.references] == [3.0, 2.0, 1.0, 0.0]  # best first
    assert first.references[-1].text.startswith("The best way to cook pork tenderloin is to bury it")
    assert max(len(e.references) for e in webglm) == 5
    msrpar = datasets.load("sts2012-msrpar", root=data_root)
    assert Counter(e.meta["split"] for e in msrpar) == {"train": 750, "test": 750}
    assert msrpar[750].label == 4.4 and msrpar[750].meta["split"] == "test"
    rag = datasets.load("ragchecker", root=data_root)
    assert [(e.meta["instance_id"], e.meta["annotator"]) for e in rag[:3]] == [(0, 1), (0, 2), (1, 1)]
    nrp = datasets.load("nrp-clef-ehealth", root=data_root)
    kinds = Counter((e.group, e.meta["kind"]) for e in nrp)
    assert set(kinds.values()) == {8, 5}  # per topic: 8 generated answers, 5 judged documents
    assert {e.meta["llm"] for e in nrp if e.meta["kind"] == "generated"} >= {"chatgpt", "gpt2", "tiiuae_falcon-7b-instruct"}


def test_fetch_verifies_checksums_and_reports_missing_files(tmp_path, mirror):
    entries = manifest_entries(("linkage/WEBGLM_50.json",))
    bad_mirror = tmp_path / "mirror"
    (bad_mirror / "linkage").mkdir(parents=True)
    (bad_mirror / "linkage/WEBGLM_50.json").write_text("{}", encoding="utf-8")
    with pytest.raises(FetchError, match=f"expected SHA-256 {entries[0].sha256}"):
        datasets.fetch("linkage-webglm", root=tmp_path / "data", mirror=bad_mirror)
    assert not list((tmp_path / "data").rglob("*.json"))  # nothing half-written is left behind
    with pytest.raises(FetchError, match="not in mirror"):
        datasets.fetch("linkage-antique", root=tmp_path / "data", mirror=bad_mirror)
    placed = datasets.fetch("linkage-webglm", root=tmp_path / "data", mirror=mirror)
    assert placed == [tmp_path / "data/linkage/WEBGLM_50.json"]


def test_a_file_given_as_the_data_folder_or_the_mirror_is_one_line(tmp_path, run_cli, mirror, monkeypatch):
    a_file = tmp_path / "d.csv"
    a_file.write_text("x\n", encoding="utf-8")
    code, _, err = run_cli(["data", "fetch", "linkage-webglm", "--dir", str(a_file), "--mirror", str(mirror)])
    assert code == 2 and f"{a_file}: expected a folder to put the data in, found a file" in err
    for given, found in ((a_file, "a file"), (tmp_path / "none", "nothing")):
        code, _, err = run_cli(["data", "fetch", "linkage-webglm", "--dir", str(tmp_path / "data"), "--mirror",
                                str(given)])
        assert code == 2 and f"--mirror {given}: expected a folder holding copies of the catalog's files, found " \
                              f"{found} there" in err
    monkeypatch.setenv("JUDGETUNE_DATA_MIRROR", str(a_file))
    with pytest.raises(DataNotFoundError, match=r"^\$JUDGETUNE_DATA_MIRROR .*d.csv: expected a folder"):
        datasets.fetch("linkage-webglm", root=tmp_path / "data")


def test_load_without_data_says_how_to_fetch(tmp_path, monkeypatch, offline_catalog):
    """No mirror and no network: one error that names both ways to get the data, nothing half-written."""
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    with pytest.raises(DataNotFoundError, match=r"download failed \(127.0.0.1: .*\); connect to the network and "
                       r"re-run .*judgetune data fetch stsb.*JUDGETUNE_DATA_MIRROR"):
        datasets.load("stsb", root=tmp_path)
    assert not list(tmp_path.rglob("*.csv")) and not list(tmp_path.rglob("*.part"))
    with pytest.raises(JudgetuneError, match="unknown data source 'nope'"):
        datasets.load("nope", root=tmp_path)


def test_load_downloads_missing_files_from_their_recorded_urls(tmp_path, monkeypatch, mirror, caplog):
    """No mirror: the missing files are downloaded from their recorded URLs (here a real HTTP server on
    127.0.0.1 serving a copy), a line per file, each checked by SHA-256; a file served wrong is refused."""
    import functools
    import http.server
    import threading
    from dataclasses import replace

    from judgetune.datasets import _fetch

    served = tmp_path / "served"
    shutil.copytree(mirror / "llmbar", served / "llmbar")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        entries = tuple(replace(e, url=base + e.path) for e in _fetch._manifest())
        monkeypatch.setattr(_fetch, "_manifest", lambda: entries)
        monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
        with caplog.at_level("WARNING"):
            assert len(datasets.load("llmbar-natural", root=tmp_path / "data")) == 100
        assert "downloading llmbar/llmbar_natural.json (128 kB) from " + base in caplog.text
        (served / "llmbar/llmbar_adversarial.json").write_text("[]")
        with pytest.raises(DataNotFoundError, match="expected SHA-256"):
            datasets.load("llmbar-adversarial", root=tmp_path / "data")
        assert not (tmp_path / "data/llmbar/llmbar_adversarial.json").exists()
    finally:
        server.shutdown()


def test_load_fetches_from_the_mirror_in_the_environment(tmp_path, monkeypatch, mirror):
    monkeypatch.setenv("JUDGETUNE_DATA_MIRROR", str(mirror))
    assert len(datasets.load("llmbar-natural", root=tmp_path)) == 100
    assert (tmp_path / "llmbar/llmbar_natural.json").is_file()


def test_every_manifest_entry_has_a_url_and_matches_the_mirror(mirror):
    from judgetune._files import sha256_of
    from judgetune.datasets._fetch import _manifest

    for entry in _manifest():
        assert entry.url and entry.url.startswith("https://raw.githubusercontent.com/")
        assert sha256_of(Path(mirror) / entry.path) == entry.sha256


def test_group_split_is_deterministic_and_keeps_groups_whole(data_root):
    examples = datasets.load("linkage-trec-dl-nf", root=data_root)
    first = split_by_group(examples, seed=3)
    again = split_by_group(list(reversed(examples)), seed=3)
    assert {k: [e.id for e in v] for k, v in first.items()} == {k: [e.id for e in v] for k, v in again.items()}
    other = split_by_group(examples, seed=4)
    assert {e.id for e in other["test"]} != {e.id for e in first["test"]}
    groups = {name: {e.group for e in part} for name, part in first.items()}
    assert not (groups["train"] & groups["dev"] or groups["train"] & groups["test"] or groups["dev"] & groups["test"])
    assert sum(len(v) for v in first.values()) == len(examples)
    shares = {k: len(v) / len(examples) for k, v in first.items()}
    assert abs(shares["train"] - 0.6) < 0.05 and abs(shares["test"] - 0.2) < 0.05


def test_official_splits_are_respected_and_dev_is_carved_from_train(data_root):
    msrpar = datasets.load("sts2012-msrpar", root=data_root)
    splits = split_examples(msrpar, seed=0)
    assert len(splits["test"]) == 750 and all(e.meta["split"] == "test" for e in splits["test"])
    assert len(splits["train"]) + len(splits["dev"]) == 750
    assert len(splits["dev"]) == 188  # a quarter of the 750 training pairs, by (singleton) group
    stsb = split_examples(datasets.load("stsb", root=data_root))
    assert {k: len(v) for k, v in stsb.items()} == {"train": 5749, "dev": 1500, "test": 1379}


def test_split_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        split_by_group([])
    with pytest.raises(ValueError, match="fractions"):
        split_by_group([datasets.Example(id="a", answer="x")], {"train": -1, "test": 1})
