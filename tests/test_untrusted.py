"""The third reliability sweep: a shared judge.json, a data file or a server is untrusted input.
Devices and FIFOs are refused unread, a key goes only where the user sent it, runs survive races, text that
cannot be written is refused at its line, the Python API checks what it is given, and a judgment that
lacks what it needs is flagged and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _kits import jsonl, length_config
from _kits import length_rows as rows

from judgetune.config import JudgeConfig

REPO = Path(__file__).resolve().parents[1]




def run_python(code: str, *, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=timeout)


# --- 1. devices and FIFOs: refused unread, in bounded time and memory ----------------------------------------

@pytest.mark.slow
def test_devices_and_fifos_as_any_input_exit_2_at_once_in_bounded_memory(tmp_path):
    """Every input (--config, --data as JSONL/CSV, --instructions, --criterion, load()) that is a device or a FIFO
    is refused with what it is: each in under 2 s and under 200 MB more than the imports."""
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "random.jsonl").symlink_to("/dev/urandom")
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe.jsonl")
    os.mkfifo(tmp_path / "pipe.json")
    jsonl(tmp_path / "ok.jsonl", rows())
    length_config(tmp_path / "len.json")
    cases = [
        (["score", "--config", "zero.json", "--data", "ok.jsonl", "--out", "o.jsonl"], "zero.json", "character device"),
        (["score", "--config", "pipe.json", "--data", "ok.jsonl", "--out", "o.jsonl"], "pipe.json", "FIFO"),
        (["score", "--config", "len.json", "--data", "random.jsonl", "--out", "o.jsonl"], "random.jsonl",
         "character device"),
        (["score", "--config", "len.json", "--data", "pipe.jsonl", "--out", "o.jsonl"], "pipe.jsonl", "FIFO"),
        (["evaluate", "--judge", "length", "--data", "zero.csv"], "zero.csv", "character device"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--instructions", "zero.json"], "zero.json",
         "character device"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--instructions", "pipe.json"], "pipe.json", "FIFO"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--criterion", "pipe.json"], "pipe.json", "FIFO"),
    ]
    done = run_python(f"""
        import contextlib, io, json, resource, time
        import judgetune, judgetune.cli
        import judgetune._api  # the library's own import (load's) is not the refusal's cost; the CLI's needs no such import
        from judgetune.errors import JudgetuneError
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = []
        for argv in {[c[0] for c in cases]!r}:
            err = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stderr(err):
                code = judgetune.cli.main(argv)
            out.append([code, err.getvalue(), time.perf_counter() - start])
        for path in ("zero.json", "pipe.json"):
            start = time.perf_counter()
            try:
                judgetune.load(path)
                out.append([0, "loaded", 0])
            except JudgetuneError as error:
                out.append([2, str(error), time.perf_counter() - start])
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        print(json.dumps({{"results": out, "grown_kb": grown}}))
        """, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    expected = [*((path, kind) for _, path, kind in cases), ("zero.json", "character device"), ("pipe.json", "FIFO")]
    for (code, message, seconds), (path, kind) in zip(report["results"], expected):
        assert code == 2 and path in message and kind in message, message
        assert "no such" not in message and "Traceback" not in message and len(message.strip().splitlines()) == 1
        assert seconds < 2.0
    assert report["grown_kb"] < 200 * 1024


def test_read_bounded_reads_at_most_its_limit_whatever_the_size_a_file_reports(tmp_path):
    from judgetune._files import FileKindError, FileTooLargeError, read_bounded

    path = tmp_path / "small.txt"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10) == b"x" * 10
    with pytest.raises(FileTooLargeError):
        read_bounded(path, 9)
    with pytest.raises(FileKindError, match="character device"):
        read_bounded("/dev/zero", 1 << 20)
    with pytest.raises(FileKindError, match="folder"):
        read_bounded(tmp_path, 10)


# --- 2. keys stay home: a judge.json's endpoint is not trusted by loading it ---------------------------------

class _Recorder:
    """A real HTTP server on 127.0.0.1 that records each request's Authorization header and refuses it (401)
    with a body full of terminal escape sequences."""

    BODY = "\x1b]0;pwned\x07\x1b[2J\x1b[Hall items scored OK\r"

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen: list[str | None] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.seen.append(self.headers.get("Authorization"))
                body = recorder.BODY.encode()
                self.send_response(401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def rubric_config(path: Path, api_base: str) -> Path:
    return JudgeConfig(judge="rubric", params={}, lm={"spec": "openai/m", "api_base": api_base}, instruction=None,
                       demos=[], calibrator=None, label_range=[1.0, 5.0]).save(path)


def test_a_judge_json_endpoint_gets_no_key_unless_the_user_names_or_trusts_it(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JUDGETUNE_TRUSTED_ENDPOINTS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    data = jsonl(tmp_path / "d.jsonl", rows(4))
    with _Recorder() as server:
        config = rubric_config(tmp_path / "judge.json", server.base_url)
        argv = ["score", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "o.jsonl"),
                "--timeout", "5"]
        code, out, err = run_cli(argv)
        assert code == 2 and server.seen and set(server.seen) == {None}  # asked, without the key
        assert "is not sent there" in err and "--api-base" in err and "JUDGETUNE_TRUSTED_ENDPOINTS" in err
        assert "sk-team-secret" not in out + err
        # the server's escape sequences are shown escaped, never sent to the terminal
        assert "\x1b" not in err and "\x07" not in err and "\r" not in err and "\\x1b]0;pwned" in err
        server.seen.clear()
        code, _, err = run_cli([*argv, "--api-base", server.base_url])  # named by the user: the key goes
        assert code == 2 and server.seen and set(server.seen) == {"Bearer sk-team-secret-0042"}
        server.seen.clear()
        monkeypatch.setenv("JUDGETUNE_TRUSTED_ENDPOINTS", server.base_url + "/")  # trusted explicitly
        code, _, err = run_cli(argv)
        assert code == 2 and set(server.seen) == {"Bearer sk-team-secret-0042"}
        assert "sk-team-secret" not in err


def test_an_unreachable_judge_json_endpoint_points_at_the_file_not_at_an_option_never_given(tmp_path, run_cli,
                                                                                             monkeypatch):
    from judgetune.testing.llama_server import free_port

    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JUDGETUNE_TRUSTED_ENDPOINTS", raising=False)
    config = rubric_config(tmp_path / "judge.json", f"http://127.0.0.1:{free_port()}/v1")
    argv = ["score", "--config", str(config), "--data", str(jsonl(tmp_path / "d.jsonl", rows(4))),
            "--out", str(tmp_path / "o.jsonl"), "--timeout", "5"]
    code, _, err = run_cli(argv)
    assert code == 2 and "connection attempts in a row failed" in err
    assert f"the endpoint {config} names, or pass --api-base" in err
    code, _, err = run_cli([*argv, "--api-base", f"http://127.0.0.1:{free_port()}/v1"])  # named: the option is meant
    assert code == 2 and "or check --api-base" in err and f"{config} names" not in err
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")  # the environment's, named by the user
    config = JudgeConfig(judge="rubric", params={}, lm={"spec": "openai/m"}, instruction=None, demos=[],
                         calibrator=None, label_range=[1.0, 5.0]).save(tmp_path / "env.json")
    code, _, err = run_cli(["score", "--config", str(config), *argv[3:]])
    assert code == 2 and "or check $OPENAI_BASE_URL" in err


def test_the_python_api_sends_the_key_only_to_a_named_endpoint(tmp_path, monkeypatch):
    import judgetune
    from judgetune.lm import ServerAuthError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JUDGETUNE_TRUSTED_ENDPOINTS", raising=False)
    with _Recorder() as server:
        config = rubric_config(tmp_path / "judge.json", server.base_url)
        with pytest.raises(ServerAuthError), judgetune.load(config) as judge:
            judge.score(answer="a", reference="b")
        assert set(server.seen) == {None}
        server.seen.clear()
        with pytest.raises(ServerAuthError), judgetune.load(config, api_base=server.base_url) as judge:
            judge.score(answer="a", reference="b")
        assert set(server.seen) == {"Bearer sk-team-secret-0042"}


def test_items_sent_to_an_endpoint_the_user_did_not_name_are_warned_of_without_a_key(tmp_path, monkeypatch, caplog):
    """With no key set, a judge.json's endpoint still receives every item: one warning says so."""
    from judgetune.lm import load_lm

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("JUDGETUNE_TRUSTED_ENDPOINTS", raising=False)
    with caplog.at_level("WARNING"):
        load_lm("openai/m", api_base="http://127.0.0.1:9/v1", trust_endpoint=False,
                endpoint_source=str(tmp_path / "judge.json")).close()
    assert "every item scored is sent there" in caplog.text and "judge.json names the endpoint" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_lm("openai/m", api_base="http://127.0.0.1:9/v1").close()  # named by the user: nothing to say
    assert "every item scored" not in caplog.text


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_at_a_metadata_address_is_refused_like_an_endpoint(monkeypatch, variable):
    """Httpx would send every request (the bearer too) through the environment's proxy; one at a
    link-local or metadata address is refused before any request, naming it; NO_PROXY exemptions hold."""
    from judgetune._endpoints import EndpointError
    from judgetune.lm import load_lm

    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "http://169.254.169.254")
    with pytest.raises(EndpointError, match="the proxy the environment sets .*169.254.169.254.* is refused"):
        load_lm("openai/m", api_base="http://127.0.0.1:9/v1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    load_lm("openai/m", api_base="http://127.0.0.1:9/v1").close()  # exempt: no proxy is used
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv(variable, "http://127.0.0.1:3128")
    load_lm("openai/m", api_base="http://127.0.0.1:9/v1").close()  # an ordinary proxy is the user's to use


def test_compare_regrade_sends_its_requests_to_the_api_base_the_user_named(tmp_path, run_cli, monkeypatch):
    """``compare --regrade --api-base URL`` scores both judges at URL, as ``compare`` does."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = jsonl(tmp_path / "d.jsonl", rows(3))
    old = rubric_config(tmp_path / "old.json", "http://127.0.0.1:9/v1")
    new = rubric_config(tmp_path / "new.json", "http://127.0.0.1:9/v1")
    with _Recorder() as server:
        code, out, err = run_cli(["compare", "--regrade", "--configs", str(old), str(new), "--data", str(data),
                                  "--api-base", server.base_url, "--timeout", "5"])
        assert code == 2 and server.seen and set(server.seen) == {"Bearer sk-team-secret-0042"}
        assert "sk-team-secret" not in out + err


def test_openai_base_url_is_the_endpoint_as_well_as_trusted(tmp_path, monkeypatch):
    """``$OPENAI_BASE_URL`` (the OpenAI SDK's) is where an ``openai/MODEL`` without an api base goes, and
    its key with it; before, it only counted as trusted while the request (and key) went to api.openai.com."""
    from judgetune.lm import ServerAuthError, load_lm

    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    with _Recorder() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        lm = load_lm("openai/m")
        try:
            assert lm.spec.api_base == server.base_url
            with pytest.raises(ServerAuthError):
                lm.client.complete([{"role": "user", "content": "hi"}], max_tokens=1)
        finally:
            lm.close()
        assert set(server.seen) == {"Bearer sk-team-secret-0042"}


def test_a_dspy_lm_sends_its_own_key_to_its_endpoint_never_the_environments(tmp_path, monkeypatch):
    """A ``dspy.LM`` handed to tune/evaluate is loaded with its own ``api_key``; one without a key that
    names another provider's api_base gets none ($OPENAI_API_KEY is for OpenAI, not for that endpoint)."""
    import dspy

    from judgetune._api import _lm_object
    from judgetune.lm import ServerAuthError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    messages = [{"role": "user", "content": "hi"}]
    with _Recorder() as server:
        for given, sent in (("sk-their-own-7", "Bearer sk-their-own-7"), (None, None)):
            lm, owned = _lm_object(dspy.LM("openai/m", api_base=server.base_url, api_key=given))
            assert owned
            try:
                with pytest.raises(ServerAuthError):
                    lm.client.complete(messages, max_tokens=1)
            finally:
                lm.close()
            assert set(server.seen) == {sent}, given
            server.seen.clear()


@pytest.mark.parametrize("api_base", ["http://169.254.169.254/v1", "http://[fe80::1]/v1", "http://metadata.google.internal/",
                                      "file:///etc/passwd", "gopher://127.0.0.1/", "http://[::ffff:169.254.169.254]/v1",
                                      "http://2852039166/v1", "http://[::1", "http://127.0.0.1:abc/v1",
                                      "http://127.0.0.1:99999/v1"])
def test_link_local_metadata_and_other_schemes_are_refused(tmp_path, run_cli, api_base):
    data = jsonl(tmp_path / "d.jsonl", rows(24))
    config = tmp_path / "judge.json"
    config.write_text(json.dumps({**json.loads(rubric_config(config, "http://127.0.0.1:9/v1").read_text()),
                                  "lm": {"spec": "openai/m", "api_base": api_base}}))
    code, _, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "o.jsonl"),
                            "--timeout", "1"])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert ("link-local or cloud metadata" in err or "expected an http(s) URL" in err), err
    code, _, err = run_cli(["evaluate", "--judge", "rubric", "--data", str(data), "--lm", "openai/m",
                            "--api-base", api_base, "--timeout", "1"])
    assert code == 2 and ("link-local or cloud metadata" in err or "expected an http(s) URL" in err), err


# --- 3. races: one tune per run, a removed run folder is one line, stale temporary files cleaned ----------------

def test_a_second_tune_on_a_run_in_use_is_refused_in_one_line(tmp_path, run_cli):
    from judgetune._files import exclusive

    data = jsonl(tmp_path / "d.jsonl", rows())
    run_dir = tmp_path / "runs" / "busy"
    run_dir.mkdir(parents=True)
    with exclusive(run_dir / ".lock", "held by this test"):  # what a running tune holds
        code, _, err = run_cli(["tune", "--judge", "length", "--data", str(data), "--run", "busy", "--runs-dir",
                                str(tmp_path / "runs"), "--trials", "1"])
    assert code == 2 and "is in use by another judgetune process" in err and len(err.strip().splitlines()) == 1
    assert not (run_dir / "study.db").exists()
    with exclusive(run_dir / ".lock", "free again"):  # the lock went with its holder
        pass


@pytest.mark.slow
def test_a_run_folder_removed_mid_tune_is_one_line(tmp_path, run_cli, monkeypatch):
    import shutil

    from judgetune.tuning import _run

    data = jsonl(tmp_path / "d.jsonl", rows())
    original = _run.run_trials

    def removed_midway(study, spec, *args, **kwargs):
        shutil.rmtree(tmp_path / "runs" / spec.name)  # `rm -rf runs/NAME` while the trials run
        return original(study, spec, *args, **kwargs)

    monkeypatch.setattr(_run, "run_trials", removed_midway)
    code, _, err = run_cli(["tune", "--judge", "length", "--data", str(data), "--run", "gone", "--runs-dir",
                            str(tmp_path / "runs"), "--trials", "1"])
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [f"judgetune: error: run gone: its folder {tmp_path / 'runs' / 'gone'} (or its "
                                        "study.db) was removed while tuning; nothing was saved. Run the command again "
                                        "to start afresh"]


def test_stale_temporary_files_of_a_killed_write_are_removed_and_a_live_writers_kept(tmp_path):
    import fcntl

    from judgetune._files import atomic_write

    out = tmp_path / "judge.json"
    stale = tmp_path / ".judge.json.dead1234.tmp"  # left by a SIGKILL mid-write
    live = tmp_path / ".judge.json.live5678.tmp"  # another process writing right now
    fresh = tmp_path / ".judge.json.new9012.tmp"  # just created, not yet locked
    other = tmp_path / ".other.json.dead1234.tmp"  # another target's: not ours to judge here
    for path in (stale, live, fresh, other):
        path.write_text("half")
    for path in (stale, live, other):
        os.utime(path, (1, 1))
    with live.open("rb") as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        with atomic_write(out) as handle:
            handle.write("{}")
    assert out.read_text() == "{}"
    assert not stale.exists() and live.exists() and fresh.exists() and other.exists()


def test_a_killed_write_leaves_a_temporary_file_that_the_next_run_removes(tmp_path):
    """A real SIGKILL in the middle of atomic_write, then a later write of the same file."""
    import signal

    done = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from judgetune._files import atomic_write
        with atomic_write({str(tmp_path / 'scores.jsonl')!r}) as out:
            out.write("half")
            out.flush()
            print("writing", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.readline().strip() == "writing"
    done.send_signal(signal.SIGKILL)
    done.wait(10)
    left = list(tmp_path.glob(".scores.jsonl.*.tmp"))
    assert len(left) == 1
    os.utime(left[0], (1, 1))
    from judgetune._files import write_text

    write_text(tmp_path / "scores.jsonl", "whole\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.jsonl"]


# --- 4. text that cannot be written is refused at its line, before any work ---------------------------------------

@pytest.mark.parametrize("judge", ["bm25", "length"])
def test_a_lone_surrogate_in_a_row_is_refused_at_its_line_before_scoring(tmp_path, run_cli, judge):
    data = rows(6)
    path = tmp_path / "d.jsonl"
    lines = [json.dumps(r) for r in data]
    lines[3] = lines[3].replace('"answer": "', '"answer": "\\ud800', 1)  # the JSON escape of a lone surrogate
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = length_config(tmp_path / "judge.json")
    out = tmp_path / "o.jsonl"
    code, _, err = run_cli(["score", "--config", str(config), "--data", str(path), "--out", str(out)])
    assert code == 2 and not out.exists() and "Traceback" not in err
    assert (f"{path}:4: answer: expected text that can be written as UTF-8, found a lone surrogate '\\ud800' at "
            "character 1") in err
    code, _, err = run_cli(["evaluate", "--judge", judge, "--data", str(path)])
    assert code == 2 and f"{path}:4: answer: expected text that can be written as UTF-8" in err


def test_a_lone_surrogate_from_python_or_an_option_is_refused_up_front(tmp_path, run_cli):
    import judgetune
    from judgetune.errors import DataValidationError, JudgetuneError

    judge = judgetune.load(length_config(tmp_path / "judge.json"))
    with pytest.raises(DataValidationError, match="item 1: answer: expected text that can be written as UTF-8"):
        judge.score_many([{"answer": "fine"}, {"answer": "bad \udcff"}])
    data = rows()
    data[2]["meta"] = {"note": "\ud800"}
    with pytest.raises(JudgetuneError, match="meta.note: expected text that can be written as UTF-8"):
        judgetune.tune(data, judge="length", name="s", runs_dir=tmp_path / "runs", n_trials=1, report=False)
    assert not (tmp_path / "runs").exists()
    path = jsonl(tmp_path / "d.jsonl", rows())
    code, _, err = run_cli(["tune", "--judge", "length", "--data", str(path), "--criterion", "how good \udcff",
                            "--runs-dir", str(tmp_path / "runs")])  # a non-UTF-8 byte in an argument
    assert code == 2 and "criterion: expected text that can be written as UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


# --- 5. the Python API checks what it is given -----------------------------------------------------------------

@pytest.mark.parametrize("answer, found", [(None, "nothing"), (5, "5"), (float("nan"), "NaN"), (b"bytes", "b'bytes'"),
                                           (["a"], '["a"]')])
def test_score_checks_its_arguments_like_score_many(tmp_path, answer, found):
    import judgetune
    from judgetune.errors import DataValidationError

    judge = judgetune.load(length_config(tmp_path / "judge.json"))
    with pytest.raises(DataValidationError) as err:
        judge.score(answer=answer)
    assert str(err.value).startswith("score(): answer: expected text, found ")
    with pytest.raises(DataValidationError, match="score\\(\\): reference\\[0\\]: expected non-empty text"):
        judge.score(answer="zebra quantum bicycle", reference="")  # an empty reference is no reference
    with pytest.raises(DataValidationError, match="score\\(\\): references"):
        judge.score(answer="a", references=[("text", "high")])
    assert isinstance(judge.score(answer="a fine answer", reference="a reference"), float)


@pytest.mark.parametrize("column", ["answer", "label"])
def test_a_dataframe_with_a_column_twice_is_refused_like_a_csv(tmp_path, column):
    pd = pytest.importorskip("pandas")
    import judgetune
    from judgetune.errors import DataValidationError

    frame = pd.DataFrame(rows(24))
    frame = pd.concat([frame, frame[[column]]], axis=1)  # two columns of that name
    with pytest.raises(DataValidationError, match=f"expected each column once, found '{column}' more than once"):
        judgetune.tune(frame, judge="length", name="twice", runs_dir=tmp_path / "runs", n_trials=1, report=False)
    assert not (tmp_path / "runs").exists()
    judge = judgetune.load(length_config(tmp_path / "judge.json"))
    with pytest.raises(DataValidationError, match="more than once"):
        judge.score_many(frame)


def test_a_tune_whose_rows_fail_validation_leaves_no_run_behind(tmp_path):
    import judgetune
    from judgetune.errors import DataValidationError

    bad = rows(24)
    bad[7]["label"] = "high"
    with pytest.raises(DataValidationError, match="rows-.*\\.jsonl:8: label: expected a number"):
        judgetune.tune(bad, judge="length", name="bad", runs_dir=tmp_path / "runs", n_trials=1, report=False)
    assert not (tmp_path / "runs" / "bad").exists()
    path = jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(DataValidationError):
        judgetune.tune(str(path), judge="length", name="file", runs_dir=tmp_path / "runs", n_trials=1, report=False)
    assert not (tmp_path / "runs" / "file").exists()


def test_the_library_api_keeps_optunas_info_lines_quiet_unless_asked(tmp_path, monkeypatch):
    import logging

    import optuna

    import judgetune
    from judgetune import tuning

    seen = []

    def fake_tune(spec, **kwargs):  # what Optuna would log at while the study runs
        seen.append(optuna.logging.get_verbosity())
        raise KeyboardInterrupt

    monkeypatch.setattr(tuning, "tune", fake_tune)
    optuna.logging.set_verbosity(logging.INFO)  # Optuna's default
    monkeypatch.setattr(logging.getLogger("judgetune"), "level", logging.NOTSET)
    for asked in (False, True):
        if asked:
            monkeypatch.setattr(logging.getLogger("judgetune"), "level", logging.INFO)
        with pytest.raises(KeyboardInterrupt):
            judgetune.tune(rows(), judge="length", name=f"q{asked}", runs_dir=tmp_path / "runs", report=False)
        assert optuna.logging.get_verbosity() == logging.INFO  # restored
    assert seen == [logging.WARNING, logging.INFO]


# --- 6. an item the judge cannot really judge is flagged and counted ---------------------------------------------

def cheap_hybrid_config(path: Path) -> Path:
    """A hybrid of reference-based signals (BM25, overlap) and length, fitted on items with references."""
    from judgetune.datasets import read_examples
    from judgetune.judges import make_judge

    train = read_examples(jsonl(path.parent / "train.jsonl", rows(24)))
    params = {"use_minilm-reference": False, "use_mpnet-reference": False, "use_minilm-question": False,
              "use_mpnet-question": False, "use_bm25": True, "use_overlap": True,
              "use_length": True}
    judge = make_judge("hybrid", None, train=train, label_range=(1.0, 5.0), params=params)
    return JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(1.0, 5.0)).save(path)


def test_an_item_scored_without_its_reference_signals_is_flagged_and_counted(tmp_path, run_cli):
    import judgetune

    config = cheap_hybrid_config(tmp_path / "judge.json")
    items = [{"id": "whole", "answer": "word word x", "reference": "word word word"},
             {"id": "no-reference", "answer": "zebra quantum bicycle"}]
    data = jsonl(tmp_path / "new.jsonl", items)
    out = tmp_path / "scores.jsonl"
    code, stdout, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(out)])
    assert code == 0, err
    written = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert "degraded" not in written["whole"]
    assert written["no-reference"]["score"] is not None
    assert any(w.startswith("bm25:") for w in written["no-reference"]["degraded"])
    assert "1 scored without some of their signals" in stdout and "bm25:" in stdout
    with judgetune.load(config) as judge:
        scores = judge.score_many(items)
    assert scores.degraded == 1 and scores[1].degraded and not scores[0].degraded


# --- 7. a CSV in another delimiter gets a hint -------------------------------------------------------------------

@pytest.mark.parametrize("suffix, delimiter, words", [(".csv", ";", "looks ';'-delimited, not comma-delimited"),
                                                      (".csv", "\t", "looks tab-delimited, not comma-delimited: name "
                                                                     "it .tsv"),
                                                      (".tsv", ",", "looks comma-delimited, not tab-delimited: name "
                                                                    "it .csv")])
def test_a_table_in_another_delimiter_is_said_to_be_one(tmp_path, suffix, delimiter, words):
    from judgetune.datasets import read_examples
    from judgetune.errors import DataValidationError

    path = tmp_path / f"data{suffix}"
    path.write_text("\n".join(delimiter.join(line) for line in (("id", "answer", "label"), ("1", "a", "2"))) + "\n")
    with pytest.raises(DataValidationError, match=words):
        read_examples(path)
    with pytest.raises(DataValidationError, match=words):  # with a mapping too
        read_examples(path, fields={"answer": "answer"}, label="label")


# --- the sweep: new cases of the same classes (docs/reliability.md lists them) ------------------------------------

def test_sweep_a_criterion_longer_than_a_file_name_is_text(tmp_path, run_cli, monkeypatch):
    from judgetune.cli._options import _text_or_file

    assert _text_or_file("a" * 300) == "a" * 300  # Path.exists raised "File name too long" (exit 1)
    assert _text_or_file("x\x00y") == "x\x00y"


@pytest.mark.parametrize("where", ["device", "file"])
def test_sweep_a_cache_folder_that_cannot_be_one_is_one_line(tmp_path, run_cli, monkeypatch, where):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", "/dev/null" if where == "device" else str(tmp_path / "afile" / "x"))
    data = jsonl(tmp_path / "d.jsonl", rows())
    code, _, err = run_cli(["evaluate", "--judge", "rubric", "--data", str(data), "--lm", "test:deterministic",
                            "--limit", "2", "--resamples", "10"])
    assert code == 2 and "the answer cache" in err and "--no-cache" in err and "Traceback" not in err


def test_sweep_the_python_api_refuses_what_is_not_data_with_its_own_errors(tmp_path):
    import judgetune
    from judgetune.errors import DataValidationError, JudgetuneError, SettingsError

    judge = judgetune.load(length_config(tmp_path / "judge.json"))
    with pytest.raises(JudgetuneError, match="items: expected a list"):
        judge.score_many(5)
    with pytest.raises(DataValidationError, match="item 1: expected an Example or a dict"):
        judge.score_many([{"answer": "a"}, 5])
    with pytest.raises(DataValidationError, match="item 0: answer: expected text, found b'x'"):
        judge.score_many([{"answer": b"x"}])  # describe() raised TypeError on bytes
    with pytest.raises(SettingsError, match="path: expected the path of a judge.json"):
        judgetune.load(None)
    with pytest.raises(SettingsError, match="unknown judge 'nope'"):
        judgetune.evaluate("nope", jsonl(tmp_path / "d.jsonl", rows()))
    with pytest.raises(SettingsError, match="unknown setting\\(s\\) 'bogus'"):
        judgetune.tune(rows(), judge="length", name="x", runs_dir=tmp_path / "runs", bogus=1)
    with pytest.raises(SettingsError, match="n_trials >= 1"):
        judgetune.tune(rows(), judge="length", name="y", runs_dir=tmp_path / "runs", n_trials=0)
    assert not (tmp_path / "runs").exists()


def test_sweep_a_run_name_cannot_write_outside_runs_dir(tmp_path):
    import judgetune
    from judgetune.errors import SettingsError

    (tmp_path / "runs").mkdir()
    with pytest.raises(SettingsError, match="expected a plain run name"):
        judgetune.tune(rows(), judge="length", name="../escape", runs_dir=tmp_path / "runs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # the rows were written to ../escape/ before


def test_sweep_a_data_path_with_a_non_utf8_byte_is_refused_before_tuning(tmp_path, run_cli):
    name = os.fsdecode(b"bad\xff.jsonl")
    jsonl(tmp_path / name, rows())
    code, _, err = run_cli(["tune", "--judge", "length", "--data", str(tmp_path / name), "--runs-dir",
                            str(tmp_path / "runs"), "--trials", "1"])  # failed when judge.json was written, at the end
    assert code == 2 and "rename the file" in err and not (tmp_path / "runs").exists()


def test_sweep_a_judge_json_with_unwritable_text_is_refused_at_load(tmp_path):
    from judgetune.config import ConfigError

    path = length_config(tmp_path / "judge.json", criterion="fluency")
    path.write_text(path.read_text().replace('"fluency"', '"fluency \\ud800"'))
    with pytest.raises(ConfigError, match="criterion: expected text that can be written as UTF-8"):
        JudgeConfig.load(path)


@pytest.mark.parametrize("layout", ["nrp-fifo", "rag-device", "scores-fifo"])
def test_sweep_other_readers_refuse_devices_and_fifos_by_name(tmp_path, run_cli, layout):
    if layout == "nrp-fifo":
        folder = tmp_path / "nrp"
        folder.mkdir()
        os.mkfifo(folder / "queries.jsonl")
        (folder / "documents.jsonl").write_text("")
        (folder / "answers.jsonl").write_text("")
        argv, name = ["nrp", "--data", str(folder), "--ranker", "bm25"], "queries.jsonl"
    elif layout == "rag-device":
        (tmp_path / "items.json").symlink_to("/dev/zero")
        argv, name = ["ragcheck", "--data", str(tmp_path / "items.json"), "--lm", "test:deterministic"], "items.json"
    else:
        from judgetune.nrp import read_scores

        os.mkfifo(tmp_path / "scores.jsonl")
        with pytest.raises(Exception, match="found a FIFO"):  # it hung: the FIFO waited for a writer
            read_scores(tmp_path / "scores.jsonl")
        return
    code, _, err = run_cli(argv)
    assert code == 2 and name in err and ("FIFO" in err or "character device" in err) and "missing" not in err


def test_sweep_link_local_behind_a_zone_id_or_the_sdk_environment_is_refused(tmp_path, monkeypatch):
    from judgetune.lm import load_lm
    from judgetune.lm._spec import LMSpecError

    with pytest.raises(LMSpecError, match="link-local"):
        load_lm("openai/m", api_base="http://[fe80::1%25eth0]/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://169.254.169.254/v1")  # "named" by the environment: still refused
    with pytest.raises(LMSpecError, match="link-local"):
        load_lm("openai/m", api_base="http://169.254.169.254/v1")


class _Hostile:
    """A real server on 127.0.0.1: ``mode`` redirect (307 to ``target``), flood (an endless 200 body) or drip
    (a byte a second)."""

    def __init__(self, mode: str, target: str = ""):
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = 0
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hostile.requests += 1
                try:
                    if mode == "redirect":
                        self.send_response(307)
                        self.send_header("Location", target + "/chat/completions")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    block = b" " * (1 << 20)
                    for _ in range(200 if mode == "flood" else 30):
                        self.wfile.write(block if mode == "flood" else b" ")
                        if mode == "drip":
                            self.wfile.flush()
                            time.sleep(0.25)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_sweep_a_redirect_is_not_followed_with_the_key(tmp_path, monkeypatch):
    from judgetune.lm import LMCallError, OpenAICompatibleClient, parse_lm_spec

    monkeypatch.setenv("OPENAI_API_KEY", "sk-team-secret-0042")
    with _Recorder() as elsewhere:
        hostile = _Hostile("redirect", elsewhere.base_url)
        try:
            client = OpenAICompatibleClient(parse_lm_spec("openai/m", api_base=hostile.base_url), max_retries=0)
            with pytest.raises(LMCallError, match="HTTP 307"):
                client.complete([{"role": "user", "content": "hi"}], max_tokens=1)
        finally:
            hostile.close()
        assert elsewhere.seen == []


@pytest.mark.parametrize("mode, words", [("flood", "exceeds 67,108,864 bytes"), ("drip", "timed out")])
def test_sweep_a_server_answer_is_read_with_a_bound_in_size_and_time(tmp_path, mode, words):
    import time

    from judgetune.lm import LMCallError, OpenAICompatibleClient, parse_lm_spec

    hostile = _Hostile(mode)
    try:
        client = OpenAICompatibleClient(parse_lm_spec("openai/m", api_base=hostile.base_url), max_retries=0,
                                        timeout=2.0)
        start = time.monotonic()
        with pytest.raises(LMCallError, match=words):
            client.complete([{"role": "user", "content": "hi"}], max_tokens=1)
        assert time.monotonic() - start < 6
    finally:
        hostile.close()


def test_sweep_text_from_a_data_file_is_printed_escaped(tmp_path, run_cli):
    path = tmp_path / "esc.csv"
    path.write_text("id,\x1b[2Jsummary\n1,x\n")
    code, _, err = run_cli(["evaluate", "--judge", "length", "--data", str(path), "--field", "answer=summary"])
    assert code == 2 and "\x1b" not in err and "\\x1b[2Jsummary" in err


def test_sweep_a_symlink_loop_as_any_input_is_one_line(tmp_path, run_cli):
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop.json")
    config = length_config(tmp_path / "judge.json")
    data = jsonl(tmp_path / "d.jsonl", rows())
    for argv, name in ((["score", "--config", str(config), "--data", str(tmp_path / "loop.jsonl")], "loop.jsonl"),
                       (["score", "--config", str(tmp_path / "loop.json"), "--data", str(data)], "loop.json"),
                       (["evaluate", "--judge", "length", "--data", str(tmp_path / "loop.jsonl")], "loop.jsonl")):
        argv += ["--out", str(tmp_path / "o.jsonl")] if argv[0] == "score" else []
        code, _, err = run_cli(argv)  # exit 1, RuntimeError "Symlink loop" from Path.resolve
        assert code == 2 and f"{name}: expected a" in err and "found a symlink loop" in err, err
