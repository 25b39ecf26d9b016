"""`data fetch` is held to the rules of a scoring request, on real servers on 127.0.0.1: no metadata address
(directly, by proxy or by redirect), no redirect followed, no byte past the manifest's size, no empty folder or
file outside the data folder after a failure; and every data file is checked against the manifest when read."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from judgetune import datasets
from judgetune.datasets import _fetch
from judgetune.datasets._fetch import DataChecksumError, FetchError, FetchRefusedError, ManifestEntry

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                   "no_proxy")
BODY = b'{"answer": "served"}\n' * 100


class Served:
    """An HTTP server on 127.0.0.1 answering every GET with ``answer(handler)``; ``hits`` lists the paths asked
    for and ``sent`` counts the body bytes written."""

    def __init__(self, answer, host: str = "127.0.0.1"):
        self.hits: list[str] = []
        self.sent = 0
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                served.hits.append(self.path)
                answer(self, served)

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/"

    def __enter__(self) -> Served:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ok(handler, served) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(BODY)))
    handler.end_headers()
    handler.wfile.write(BODY)
    served.sent += len(BODY)


def _redirect_to(location: str):
    def answer(handler, served) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
    return answer


def _endless(handler, served) -> None:
    """A body far larger than the manifest says (50 MB), written until the client hangs up."""
    handler.send_response(200)
    handler.end_headers()
    block = b"x" * 65536
    try:
        for _ in range(800):
            handler.wfile.write(block)
            served.sent += len(block)
    except OSError:
        pass


def _not_found(handler, served) -> None:
    handler.send_error(404)


def _entry(url: str, path: str = "llmbar/llmbar_natural.json") -> ManifestEntry:
    return ManifestEntry(path=path, sha256=hashlib.sha256(BODY).hexdigest(), size=len(BODY), url=url)


@pytest.fixture
def no_proxy(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_served_file_is_fetched(tmp_path, no_proxy):
    with Served(_ok) as server:
        placed = _fetch.fetch_files([_entry(server.url + "f.json")], tmp_path / "data", None)
    assert placed[0].read_bytes() == BODY and server.hits == ["/f.json"]


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/x",
                                 "http://metadata.google.internal/computeMetadata/v1/", "http://2852039166/x"])
def test_a_metadata_address_is_refused_before_any_request(tmp_path, no_proxy, url):
    start = time.monotonic()
    with pytest.raises(FetchRefusedError, match=r"download URL .*(link-local or cloud metadata address).*never a "
                                                r"data source"):
        _fetch.fetch_files([_entry(url)], tmp_path / "data", None)
    assert time.monotonic() - start < 2 and not (tmp_path / "data").exists()


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_at_a_metadata_address_is_refused(tmp_path, no_proxy, monkeypatch, variable):
    monkeypatch.setenv(variable, "http://169.254.169.254:80")
    with Served(_ok) as server:
        start = time.monotonic()
        with pytest.raises(FetchRefusedError, match=r"the proxy the environment sets .*169.254.169.254.* is refused"):
            _fetch.fetch_files([_entry(server.url + "f.json")], tmp_path / "data", None)
        assert time.monotonic() - start < 2
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # exempt: no proxy is used
        _fetch.fetch_files([_entry(server.url + "f.json")], tmp_path / "data", None)
    assert server.hits == ["/f.json"]


def test_a_redirect_is_never_followed_to_metadata_or_another_host(tmp_path, no_proxy):
    with Served(_ok, host="127.0.0.1") as other:
        elsewhere = other.url.replace("127.0.0.1", "localhost") + "f.json"  # another host name
        for location in ("http://169.254.169.254/latest/meta-data/iam/", elsewhere, "/same-host.json"):
            with Served(_redirect_to(location)) as server:
                with pytest.raises(FetchRefusedError, match=r"redirects to .*not followed"):
                    _fetch.fetch_files([_entry(server.url + "f.json")], tmp_path / "data", None)
            assert server.hits == ["/f.json"]
    assert other.hits == [] and not (tmp_path / "data").exists()


def test_a_redirect_while_loading_says_so_not_to_connect_to_the_network(tmp_path, no_proxy, monkeypatch):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    with Served(_redirect_to("http://169.254.169.254/")) as server:
        entries = tuple(replace(e, url=server.url + e.path) for e in _fetch._manifest())
        monkeypatch.setattr(_fetch, "_manifest", lambda: entries)
        with pytest.raises(FetchRefusedError, match=r"llmbar/llmbar_natural.json: .* redirects to "
                                                    r"'http://169.254.169.254/'"):
            datasets.load("llmbar-natural", root=tmp_path / "data")


def test_a_download_stops_reading_past_the_recorded_size(tmp_path, no_proxy):
    with Served(_endless) as server:
        start = time.monotonic()
        with pytest.raises(FetchError, match=rf"more than the recorded {len(BODY):,} bytes; stopped reading"):
            _fetch.fetch_files([_entry(server.url + "f.json")], tmp_path / "data", None)
        took = time.monotonic() - start
    assert server.sent < 10_000_000 and took < 5  # of the 50 MB offered, only what the socket buffers held
    assert not (tmp_path / "data").exists()


def test_a_mirror_file_larger_than_recorded_is_not_copied_whole(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "llmbar").mkdir(parents=True)
    (mirror / "llmbar/llmbar_natural.json").write_bytes(BODY * 3)
    with pytest.raises(FetchError, match=rf"holds more than the recorded {len(BODY):,} bytes"):
        _fetch.fetch_files([_entry("unused")], tmp_path / "data", mirror)
    assert not (tmp_path / "data").exists()


def test_a_failed_fetch_leaves_no_empty_folder(tmp_path, no_proxy):
    (tmp_path / "data").mkdir()  # the user's own folder stays; the ones the fetch made go
    with Served(_not_found) as server:
        with pytest.raises(FetchError, match=r"HTTP 404"):
            _fetch.fetch_files([_entry(server.url + "x", "sts/sts2012_msrpar/MSRpar.train.tsv")], tmp_path / "data",
                               None)
    assert list((tmp_path / "data").iterdir()) == []
    with pytest.raises(FetchError, match="not in mirror"):
        _fetch.fetch_files([_entry("unused", "a/b/c/d.json")], tmp_path / "new", tmp_path / "nomirror")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("path", ["sts/sts2012_msrpar/../../../escaped.txt", "ABSOLUTE",
                                  "sts/sts2012_msrpar/..\\..\\escaped.txt", "sts/./x.txt"])
def test_a_manifest_row_outside_the_data_folder_is_refused(tmp_path, monkeypatch, path):
    """A mirror that holds the file where the row points: nothing is written outside the data folder."""
    inner_mirror, inner_root = tmp_path / "m" / "inner", tmp_path / "d" / "inner"
    inner_mirror.mkdir(parents=True)  # a mirror folder; the row points out of it, at m/escaped.txt
    (tmp_path / "m" / "escaped.txt").write_bytes(BODY)
    path = str(tmp_path / "d" / "escaped.txt") if path == "ABSOLUTE" else path
    entry = replace(_entry("unused"), path=path)
    monkeypatch.setattr(_fetch, "_manifest", lambda: (entry,))
    with pytest.raises(FetchRefusedError, match=r"manifest row .*: expected a relative path inside the data folder"):
        _fetch.fetch_files([entry], inner_root, inner_mirror)
    assert not (tmp_path / "d").exists()
    if path.startswith("sts/sts2012_msrpar/"):  # a catalog source's own rows are checked the same way
        with pytest.raises(FetchRefusedError, match=r"manifest row"):
            datasets.fetch("sts2012-msrpar", root=inner_root, mirror=inner_mirror)
        assert not (tmp_path / "d").exists()


def _fetched(tmp_path: Path, mirror: Path, name: str = "llmbar-natural") -> Path:
    root = tmp_path / "datasets"
    datasets.fetch(name, root=root, mirror=mirror)
    return root


@pytest.mark.parametrize("damage", ["truncated", "edited", "replaced"])
def test_a_damaged_data_file_is_refused_when_read(tmp_path, mirror, monkeypatch, damage):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    root = _fetched(tmp_path, mirror)
    assert len(datasets.load("llmbar-natural", root=root)) == 100  # read once: verified and remembered
    path = root / "llmbar/llmbar_natural.json"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "edited":  # the same size, one label changed
        path.write_bytes(data.replace(b'"output_a"', b'"output_b"', 1) if b'"output_a"' in data else data[::-1])
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    else:  # a valid JSON list of the same shape, written by hand
        path.write_text("[]", encoding="utf-8")
    with pytest.raises(DataChecksumError) as err:
        datasets.load("llmbar-natural", root=root)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: expected the catalogued file ({len(data):,} bytes, SHA-256 ")
    assert "run `judgetune data fetch llmbar-natural` to restore it" in line
    datasets.fetch("llmbar-natural", root=root, mirror=mirror)  # what the line says to do
    assert len(datasets.load("llmbar-natural", root=root)) == 100


def test_a_damaged_data_file_is_one_line_from_the_cli(tmp_path, mirror, monkeypatch, run_cli):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    root = _fetched(tmp_path, mirror)
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(root))
    (root / "llmbar/llmbar_natural.json").write_text("[]", encoding="utf-8")
    code, out, err = run_cli(["data", "show", "llmbar-natural"])
    assert code == 2 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "llmbar_natural.json: expected the catalogued file" in err and "judgetune data fetch llmbar-natural" in err


def test_checking_msrpar_on_every_read_hashes_each_file_once(tmp_path, mirror, monkeypatch):
    monkeypatch.delenv("JUDGETUNE_DATA_MIRROR", raising=False)
    root = tmp_path / "datasets"
    shutil.copytree(mirror / "sts/sts2012_msrpar", root / "sts/sts2012_msrpar")  # present, never verified yet
    monkeypatch.setattr(_fetch, "_verified", {})
    hashed: list[Path] = []
    real_sha256_of = _fetch.sha256_of
    monkeypatch.setattr(_fetch, "sha256_of", lambda path: hashed.append(Path(path)) or real_sha256_of(path))
    assert len(datasets.load("sts2012-msrpar", root=root)) == 1500
    assert len(hashed) == len(set(hashed)) == 4  # the cold read hashes every file of the source once
    for _ in range(5):
        datasets.load("sts2012-msrpar", root=root)
    assert len(hashed) == 4  # later reads know each file by its size and modification time
    assert len(_fetch._verified) == 4
    victim = sorted(hashed)[0]
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 1_000_000_000))
    datasets.load("sts2012-msrpar", root=root)
    assert hashed[4:] == [victim]  # a touched file is hashed again
