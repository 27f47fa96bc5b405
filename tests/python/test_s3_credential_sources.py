"""Credentials an s3:// read takes from a source the environment or the config file names, which
Arrow's client (the AWS SDK's chain) resolved on its own before: a profile's
credential_process, and a container's credentials endpoint. A credential_process whose JSON
held CR LF in a token went raw into every request's headers (the SDK checks nothing); a
container endpoint that answered shardload's own fetch with a redirect to a plain-http host
elsewhere was then fetched again by the SDK, which followed the redirect and signed with the
keys that host gave. Both are now resolved by shardload alone: checked, refused naming the
source (never the value), and handed to Arrow's client as explicit keys. Each case runs in a
process of its own (sources are asked once per process) against the tests' moto server, with
the source served by a small http server or a script here."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
pytest.importorskip("boto3")

import closing_server  # noqa: E402
import s3_server  # noqa: E402
# The child process that loads and its data, as the environment's values are tried.
from test_s3_env_values import CHILD, SECRET, data  # noqa: E402,F401 (data: a fixture)

WANT = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _load(url: str, options: dict[str, str], env: dict[str, str]) -> dict:
    """What a fresh process's shardload.numpy.load(url) gives with no key pair in the
    environment or the files, and ``env`` set."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    full.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    full.update(env)
    p = subprocess.run([sys.executable, "-c", CHILD, url, json.dumps(options)], env=full,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _process(tmp_path: pathlib.Path, document: dict | str, status: int = 0) -> dict[str, str]:
    """A config file whose default profile's credential_process prints ``document`` (and
    counts its runs in tmp_path/runs), as the environment that names it."""
    text = document if isinstance(document, str) else json.dumps(document)
    (tmp_path / "out.json").write_text(text)
    script = tmp_path / "creds.sh"
    script.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\n"
                      f"cat {tmp_path / 'out.json'}\nexit {status}\n")
    script.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {script}\n")
    return {"AWS_CONFIG_FILE": str(config)}


def _runs(tmp_path: pathlib.Path) -> int:
    runs = tmp_path / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


KEYS = {"Version": 1, "AccessKeyId": "testing", "SecretAccessKey": "testing"}


@pytest.mark.parametrize("field, value, code", [
    ("SessionToken", SECRET + "\r\nX-Injected: from-credential-process", "0x0D"),
    ("SessionToken", SECRET + "\n", "0x0A"),
    ("AccessKeyId", "testing\n", "0x0A"),
    ("SecretAccessKey", SECRET + "\tx", "0x09"),
])
def test_a_credential_process_value_with_a_control_character_is_refused(
        data: s3_server.Bucket, tmp_path: pathlib.Path, field: str, value: str,
        code: str) -> None:
    env = _process(tmp_path, {**KEYS, field: value})
    got = _load(data.url("d/x.npy"), data.options, env)
    assert got.get("error") == "ValueError", got
    assert "the credential_process of profile 'default' in the shared config file" in \
        got["message"], got
    assert f"its output's {field} holds a control character ({code};" in got["message"], got
    assert SECRET not in got["message"]


@pytest.mark.parametrize("field", ["SessionToken", "SecretAccessKey"])
def test_a_credential_process_value_with_a_non_ascii_character_is_refused(
        data: s3_server.Bucket, tmp_path: pathlib.Path, field: str) -> None:
    """A C1 control (U+0085, NEL) in its output went into the signed headers as UTF-8 (a bare
    HTTP 403): AWS's keys and tokens are ASCII, so the output is refused as with a control
    character, naming the field and the character's code, never the value."""
    env = _process(tmp_path, {**KEYS, field: SECRET + "\u0085END"})
    got = _load(data.url("d/x.npy"), data.options, env)
    assert got.get("error") == "ValueError", got
    assert f"its output's {field} holds a non-ASCII character (U+0085;" in got["message"], got
    assert SECRET not in got["message"]


def test_a_credential_process_signs_both_clients_and_runs_once(
        data: s3_server.Bucket, tmp_path: pathlib.Path) -> None:
    """Its keys load an object (the signed path) and a directory (Arrow's LIST): the process
    ran once, here, not again by the AWS SDK's chain."""
    data.put_npy("dir/shard_0000.npy", np.arange(3.0))
    env = _process(tmp_path, {**KEYS, "SessionToken": "TOK",
                              "Expiration": "2099-01-01T00:00:00Z"})
    assert _load(data.url("d/x.npy"), data.options, env) == {"loaded": WANT}
    assert _runs(tmp_path) == 1
    assert _load(data.url("dir/"), data.options, env) == {"loaded": [0.0, 1.0, 2.0]}
    assert _runs(tmp_path) == 2  # one per process


@pytest.mark.parametrize("document, status, why", [
    (KEYS, 3, "it exited with status 3"),
    ("not json", 0, "its output is not a JSON object"),
    ({**KEYS, "Version": 2}, 0, "its output has no \"Version\": 1"),
    ({"Version": 1, "AccessKeyId": "testing"}, 0, "lacks AccessKeyId or SecretAccessKey"),
])
def test_a_credential_process_that_gives_none_is_an_error_naming_it(
        data: s3_server.Bucket, tmp_path: pathlib.Path, document: dict | str, status: int,
        why: str) -> None:
    got = _load(data.url("d/x.npy"), data.options, _process(tmp_path, document, status))
    assert got.get("error") == "ValueError", got
    assert "the credential_process of profile 'default'" in got["message"], got
    assert why in got["message"], got


def test_a_failing_credential_process_runs_once_for_a_directory(
        data: s3_server.Bucket, tmp_path: pathlib.Path) -> None:
    """A directory's load asks for credentials per request (its manifest, its LIST, each
    shard), and a credential_process that failed was run again for each: 5 runs, 5 prompts of
    an SSO or second-factor helper, for one load. Its failure is given again, without a run,
    for 10 s; then it is run again (a retry after logging in)."""
    import time

    for i in range(6):
        data.put_npy(f"dir/shard_{i:04d}.npy", np.arange(3.0) + i)
    env = _process(tmp_path, KEYS, status=3)
    got = _load(data.url("dir/"), data.options, env)
    assert "the credential_process of profile 'default'" in got.get("message", ""), got
    assert "it exited with status 3" in got["message"], got
    assert _runs(tmp_path) == 1
    # In one process: a second load at once gives the failure without a run, a third 10 s
    # after the first failure runs it again.
    child = textwrap.dedent("""
        import json, sys, time
        import shardload.numpy as snp
        for wait in (0, 0, 10.5):
            time.sleep(wait)
            try:
                snp.load(sys.argv[1], storage_options=json.loads(sys.argv[2]))
            except Exception as e:
                print(json.dumps(str(e)), flush=True)
    """)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    full.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                 **env})
    (tmp_path / "runs").unlink()
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", child, data.url("dir/"), json.dumps(data.options)],
                       env=full, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t >= 10.5
    messages = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(messages) == 3 and all("it exited with status 3" in m for m in messages), \
        (p.stdout, p.stderr)
    assert "s ago; a failed run is run again only after 10 s)" in messages[1], messages[1]
    assert _runs(tmp_path) == 2  # the third load ran it again


@pytest.mark.parametrize("caller", ["python", "inspect", "inspect --json"])
def test_a_credential_process_that_never_answers_ends_with_ctrl_c(
        data: s3_server.Bucket, tmp_path: pathlib.Path, cli: pathlib.Path, caller: str) -> None:
    """A credential_process waiting on a prompt nobody sees (or hung) held the load for ever:
    the pipe was read until it closed, past a Ctrl-C. Now Ctrl-C ends the load at once with
    KeyboardInterrupt, and the process and what it started are killed (its deadline of 120 s
    is core_tests' CredentialProcess.OneThatDoesNotAnswerIsEndedAtItsDeadline). The command
    line says only that it was interrupted (it printed a usage error first, "bad object-storage
    credentials: ... ended by the interrupt; see 'shardload inspect --help'")."""
    import signal
    import time

    script = tmp_path / "creds.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path / 'pid'}\nwait\n")
    script.chmod(0o755)
    (tmp_path / "config").write_text(f"[default]\ncredential_process = {script}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "config"),
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    child = ("import json, sys, time\nimport shardload.numpy as snp\nt = time.monotonic()\n"
             "try:\n    snp.load(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
             "except BaseException as e:\n"
             "    print(type(e).__name__, round(time.monotonic() - t, 1), flush=True)\n")
    if caller == "python":
        args = [sys.executable, "-c", child, data.url("d/x.npy"), json.dumps(data.options)]
    else:
        query = "&".join(f"{k}={v}" for k, v in data.options.items())
        args = [str(cli), *caller.split(), data.url("d/x.npy") + "?" + query]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "pid").exists(), proc.communicate(timeout=5)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        # The sleeper holds the child's stderr: killed first, or communicate waits for it.
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        proc.kill()
        proc.communicate()
        pytest.fail("Ctrl-C did not end a load waiting on its credential_process")
    if caller == "python":
        assert out.startswith("KeyboardInterrupt"), (out, err)
    else:
        assert proc.returncode == 130, (out, err)
        assert err.strip() == "shardload inspect: interrupted", err
    sleeper = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while pathlib.Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
        state = pathlib.Path(f"/proc/{sleeper}/stat").read_text(errors="replace").split(") ")[-1]
        if state.startswith("Z"):
            break  # killed, not yet reaped by its new parent
        time.sleep(0.1)
    else:
        assert not pathlib.Path(f"/proc/{sleeper}").exists(), "what it started still runs"


def test_a_credential_process_can_ask_on_the_terminal(data: s3_server.Bucket,
                                                      tmp_path: pathlib.Path) -> None:
    """A helper that asks for a second factor on the controlling terminal reads the answer
    typed there: it runs in the load's process group, the terminal's foreground one (in a
    group of its own it was stopped by SIGTTIN at its read, and the load failed at 120 s)."""
    import pty
    import select
    import time

    script = tmp_path / "creds.sh"
    script.write_text("#!/bin/sh\nprintf 'MFA code: ' > /dev/tty\nread code < /dev/tty\n"
                      f"echo \"$code\" > {tmp_path / 'typed'}\n"
                      f"cat {tmp_path / 'out.json'}\n")
    script.chmod(0o755)
    (tmp_path / "out.json").write_text(json.dumps(KEYS))
    (tmp_path / "config").write_text(f"[default]\ncredential_process = {script}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "config"),
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    pid, fd = pty.fork()
    if pid == 0:  # the load, the pseudo-terminal its controlling terminal
        os.execve(sys.executable, [sys.executable, "-c", CHILD, data.url("d/x.npy"),
                                   json.dumps(data.options)], env)
    out = b""
    typed = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # the child's end closed
                    break
                if not chunk:
                    break
                out += chunk
            if not typed and b"MFA code:" in out:
                os.write(fd, b"123456\n")
                typed = True
    finally:
        if os.waitpid(pid, os.WNOHANG)[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert typed, out
    assert (tmp_path / "typed").read_text().strip() == "123456", out
    last = out.decode(errors="replace").strip().splitlines()[-1]
    assert json.loads(last) == {"loaded": WANT}, out


class _Lines:
    """A request handler's input that keeps the lines read from it, as they came."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self._lines: list[bytes] = []

    def readline(self, *size: int) -> bytes:
        line = self._f.readline(*size)
        self._lines.append(line)
        return line

    def take(self) -> list[bytes]:
        lines, self._lines = self._lines, []
        return lines

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


class ContainerEndpoint(contextlib.ExitStack):
    """A container credentials endpoint on every address of this host: /creds answers with
    ``answer`` (a credentials document, or a redirect to /elsewhere on ``redirect_to``);
    /elsewhere answers with keys. Each request's path and User-Agent are logged, and its
    Authorization header's raw bytes (None where it has none)."""

    def __init__(self, redirect_to: str | None = None, token: str = "TOK") -> None:
        super().__init__()
        self.log: list[tuple[str, str]] = []
        self.authorization: list[bytes | None] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                self.rfile = _Lines(self.rfile)

            def do_GET(self) -> None:  # noqa: N802
                endpoint.log.append((self.path, self.headers.get("User-Agent") or ""))
                # The header's line as it came: the parsed headers take a bare CR for a line end.
                lines = self.rfile.take()
                got = [line for line in lines if line.lower().startswith(b"authorization:")]
                endpoint.authorization.append(
                    got[0][len(b"authorization:"):].lstrip(b" ").removesuffix(b"\r\n")
                    if got else None)
                if self.path == "/creds" and redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location",
                                     f"http://{redirect_to}:{endpoint.port}/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                doc = {"AccessKeyId": "testing", "SecretAccessKey": "testing", "Token": token,
                       "Expiration": "2099-01-01T00:00:00Z"}
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = self.enter_context(closing_server.serving(Handler, host="0.0.0.0"))
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/creds"


@pytest.fixture
def elsewhere() -> Iterator[str]:
    address = closing_server.this_hosts_address()
    if address is None:
        pytest.skip("this machine has no IPv4 address but loopback ones")
    yield address


def test_a_container_endpoints_redirect_stops_the_load(data: s3_server.Bucket,
                                                      elsewhere: str) -> None:
    """The loopback endpoint answers 302 to a plain-http address elsewhere: the load is an
    error naming the endpoint and the redirect, and the other address is asked nothing (the
    AWS SDK's chain, handed the same source before, followed it and signed with its keys)."""
    with ContainerEndpoint(redirect_to=elsewhere) as source:
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url,
               "AWS_CONTAINER_AUTHORIZATION_TOKEN": "CONTAINERTOKEN"}
        got = _load(data.url("d/x.npy"), data.options, env)
        assert got.get("error") == "ValueError", got
        assert f"the container credentials endpoint {source.url} " \
            "(AWS_CONTAINER_CREDENTIALS_FULL_URI) gave no credentials: HTTP 302" in \
            got["message"], got
        assert "(a redirect: not followed)" in got["message"], got
        assert "CONTAINERTOKEN" not in got["message"]
        assert [p for p, _ in source.log] == ["/creds"], source.log


def test_a_container_answer_with_a_control_character_stops_the_load(
        data: s3_server.Bucket) -> None:
    with ContainerEndpoint(token=SECRET + "\r\nX-Injected: from-endpoint") as source:
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url})
        assert got.get("error") == "ValueError", got
        assert f"the container credentials endpoint {source.url} " in got["message"], got
        assert "hold a control character (0x0D;" in got["message"], got
        assert SECRET not in got["message"]
        assert [p for p, _ in source.log] == ["/creds"], source.log


def test_a_container_url_the_sdks_refuse_stops_the_load(data: s3_server.Bucket,
                                                       elsewhere: str) -> None:
    with ContainerEndpoint() as source:
        url = f"http://{elsewhere}:{source.port}/creds"
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": url})
        assert got.get("error") == "ValueError", got
        assert f"AWS_CONTAINER_CREDENTIALS_FULL_URI (environment) {url} is refused" in \
            got["message"], got
        assert source.log == []


def test_a_containers_keys_are_arrows_too(data: s3_server.Bucket) -> None:
    """A directory's load lists through Arrow's client: it is given the keys shardload
    fetched, and the AWS SDK does not ask the endpoint again on its own terms."""
    data.put_npy("dir/shard_0000.npy", np.arange(3.0))
    with ContainerEndpoint() as source:
        got = _load(data.url("dir/"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url})
        assert got == {"loaded": [0.0, 1.0, 2.0]}, got
        assert len(source.log) == 1, source.log
        assert not source.log[0][1].startswith("aws-sdk"), source.log


def _load_with_token_file(data: s3_server.Bucket, tmp_path: pathlib.Path,
                          written: bytes) -> tuple[dict, ContainerEndpoint]:
    """The child's load of data's d/x.npy with no keys but a container endpoint whose token is
    read from a file holding `written`; the endpoint, for what it was sent."""
    token_file = tmp_path / "token"
    token_file.write_bytes(written)
    with ContainerEndpoint() as source:
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url,
                     "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file)})
    return got, source


@pytest.mark.parametrize("written", [b"CONTAINERTOKEN", b"CONTAINERTOKEN\n",
                                     b"CONTAINERTOKEN\r\n"])
def test_a_token_files_line_end_is_no_part_of_the_token(
        data: s3_server.Bucket, tmp_path: pathlib.Path, written: bytes) -> None:
    """A token file written with a line end (by an editor, by Windows, by `kubectl create
    secret --from-file`) sends the token without it, as the credentials file's lines are read:
    the CR of CR LF went out as the token's last byte."""
    got, source = _load_with_token_file(data, tmp_path, written)
    assert got == {"loaded": WANT}, got
    assert source.authorization == [b"CONTAINERTOKEN"], source.authorization


@pytest.mark.parametrize("written, found", [
    (SECRET.encode() + b"\rX-Injected: from-token-file\n", "a control character (0x0D;"),
    (SECRET.encode() + b"\r\n\r\n", "a control character (0x0D;"),  # one line end is stripped
    (SECRET.encode() + b"\n\n", "a control character (0x0A;"),
    (SECRET.encode() + b"\x00CUT\n", "a control character (0x00;"),
    (SECRET.encode() + b"\tx", "a control character (0x09;"),
    ((SECRET + "\u00e9\u0085\n").encode(), "a non-ASCII character (U+00E9;"),
    (SECRET.encode() + b"\xe9\n", "a non-ASCII character (0xE9;"),  # latin-1, no UTF-8
])
def test_a_token_file_with_a_control_or_non_ascii_character_is_refused(
        data: s3_server.Bucket, tmp_path: pathlib.Path, written: bytes, found: str) -> None:
    """The token read from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE is checked as the variable
    AWS_CONTAINER_AUTHORIZATION_TOKEN is: refused before any request, naming the variable and
    the file, never the token. Sent, a CR added a header line to the endpoint's request, a NUL
    cut the token short without a word, a non-ASCII character went out as raw UTF-8."""
    got, source = _load_with_token_file(data, tmp_path, written)
    token_file = tmp_path / "token"
    assert got.get("error") == "ValueError", got
    assert "bad object-storage credentials: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " \
        f"(environment) {token_file} holds {found}" in got["message"], got
    assert SECRET not in got["message"], got
    assert source.log == [], source.log


def test_a_token_file_that_cannot_be_read_is_refused(data: s3_server.Bucket,
                                                     tmp_path: pathlib.Path) -> None:
    """The file names the token to send: one missing is an error naming it, not a request sent
    with the variable's token or none."""
    missing = tmp_path / "no-such-token"
    with ContainerEndpoint() as source:
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url,
                     "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(missing),
                     "AWS_CONTAINER_AUTHORIZATION_TOKEN": SECRET})
        assert got.get("error") == "ValueError", got
        assert "bad object-storage credentials: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " \
            f"(environment) {missing} cannot be read: No such file or directory" in \
            got["message"], got
        assert SECRET not in got["message"], got
        assert source.log == [], source.log


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_token_file_that_is_not_a_regular_file_is_refused(data: s3_server.Bucket,
                                                            tmp_path: pathlib.Path,
                                                            kind: str) -> None:
    """A FIFO no one writes held the load in the file's open for good (until Ctrl-C): it is
    refused at once naming it, as a directory is, and the endpoint is asked nothing."""
    token_file = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(token_file)
    else:
        token_file.mkdir()
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    full.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    with ContainerEndpoint() as source:
        full.update({"AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url,
                     "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file)})
        try:
            p = subprocess.run([sys.executable, "-c", CHILD, data.url("d/x.npy"),
                                json.dumps(data.options)], env=full, capture_output=True,
                               text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the load of a token file that is a {kind} did not end in 30 s")
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got.get("error") == "ValueError", got
        assert "bad object-storage credentials: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " \
            f"(environment) {token_file} is not a regular file" in got["message"], got
        assert source.log == [], source.log


@pytest.mark.parametrize("variable, name", [("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
                                            ("AWS_CONFIG_FILE", "config")])
def test_a_shared_file_that_is_a_fifo_is_refused(data: s3_server.Bucket, tmp_path: pathlib.Path,
                                                 variable: str, name: str) -> None:
    """The shared credentials and config files are read to their end, by shardload and by the
    AWS SDK as Arrow initializes it: a FIFO no one writes held the load in the file's open for
    good (until Ctrl-C; hostile pass 30, B1's rest). It is refused at once naming it; the
    load's own keys do not matter (the SDK reads the config file whatever they are)."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull, variable: str(fifo)})
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, data.url("d/x.npy"),
                            json.dumps(data.options)], env=env, capture_output=True, text=True,
                           timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the load with {variable} naming a FIFO did not end in 30 s")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got.get("error") == "ValueError", got
    assert f"bad object-storage credentials: the shared {name} file {fifo} ({variable}) is a " \
        "FIFO, not a regular file" in got["message"], got


class _Recorder(contextlib.ExitStack):
    """An http server on 127.0.0.1 that logs each request (method, target as sent, its
    Authorization and IMDS token headers): as ``proxy`` it answers 502 to all; as a credentials
    source it is a container's endpoint (/creds, with the token) and an instance metadata
    service (IMDSv2), answering with keys."""

    def __init__(self, proxy: bool) -> None:
        super().__init__()
        self.log: list[tuple[str, str, str | None, str | None]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _any(self) -> None:
                recorder.log.append((self.command, self.path, self.headers.get("Authorization"),
                                     self.headers.get("X-aws-ec2-metadata-token")))
                if proxy:
                    return self._answer(502, "a proxy")
                role = "/latest/meta-data/iam/security-credentials/"
                keys = json.dumps({"AccessKeyId": "testing", "SecretAccessKey": "testing",
                                   "Token": "roletoken", "Code": "Success",
                                   "Expiration": "2099-01-01T00:00:00Z"})
                if self.command == "PUT" and self.path == "/latest/api/token":
                    return self._answer(200, "imds-session")
                if self.path == "/creds":
                    return self._answer(200, keys)
                if self.path == role:
                    return self._answer(200, "train-role\n")
                if self.path == role + "train-role":
                    return self._answer(200, keys)
                self._answer(404, "not found")

            do_GET = do_PUT = do_HEAD = do_POST = _any  # noqa: N815

        self.httpd = self.enter_context(closing_server.serving(Handler))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.mark.parametrize("proxy_variable", ["http_proxy", "all_proxy"])
@pytest.mark.parametrize("source", ["container", "instance"])
def test_credentials_sources_are_asked_directly_never_through_a_proxy(
        data: s3_server.Bucket, proxy_variable: str, source: str) -> None:
    """A container's credentials endpoint and the instance metadata service are asked
    directly, whatever proxy the environment names, as botocore asks them: through
    http_proxy the container's token went in plain http to the proxy host (hostile pass 31,
    B1), and the proxy answered for the credentials. The object requests still take the
    proxy where the environment says so; here no_proxy exempts the store ("localhost", the
    credentials' source being 127.0.0.1), so that the load can end."""
    options = dict(data.options,
                   endpoint_override=data.options["endpoint_override"].replace("127.0.0.1",
                                                                               "localhost"))
    with _Recorder(proxy=True) as proxy, _Recorder(proxy=False) as creds:
        env = {proxy_variable: proxy.url, "no_proxy": "localhost"}
        if source == "container":
            env |= {"AWS_CONTAINER_CREDENTIALS_FULL_URI": creds.url + "/creds",
                    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "CONTAINERTOKEN"}
        else:
            env |= {"AWS_EC2_METADATA_DISABLED": "false",
                    "AWS_EC2_METADATA_SERVICE_ENDPOINT": creds.url}
        got = _load(data.url("d/x.npy"), options, env)
    assert proxy.log == [], proxy.log
    assert got == {"loaded": WANT}, got
    if source == "container":
        assert ("GET", "/creds", "CONTAINERTOKEN", None) in creds.log, creds.log
    else:
        assert ("PUT", "/latest/api/token", None, None) in creds.log, creds.log
        assert ("GET", "/latest/meta-data/iam/security-credentials/train-role", None,
                "imds-session") in creds.log, creds.log


def _load_bounded(url: str, options: dict[str, str], env: dict[str, str],
                  timeout: float = 20) -> dict:
    """_load's answer, in a child whose address space is bounded (4 GiB) and that is killed
    after ``timeout`` seconds: a test of what read for ever fails instead of hanging."""
    import resource

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    full.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    full.update(env)
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, url, json.dumps(options)], env=full,
                           capture_output=True, text=True, timeout=timeout, preexec_fn=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the load with {env} did not end in {timeout} s")
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("variable, name", [("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
                                            ("AWS_CONFIG_FILE", "config")])
@pytest.mark.parametrize("path, kind", [("/dev/zero", "character device"),
                                        ("/dev/urandom", "character device"),
                                        ("directory", "directory")])
def test_a_shared_file_that_is_no_regular_file_is_refused(
        data: s3_server.Bucket, tmp_path: pathlib.Path, variable: str, name: str, path: str,
        kind: str) -> None:
    """A shared credentials or config file that is a device other than /dev/null was read to
    its end, which /dev/zero and /dev/urandom have not: the load spun, its memory growing,
    Ctrl-C unheard (hostile pass 31, B4). Anything but a regular file or /dev/null is refused
    at once naming the file and the variable, keys in the options or not (the AWS SDK reads
    the config file whatever they are)."""
    if path == "directory":
        path = str(tmp_path / name)
        os.mkdir(path)
    got = _load_bounded(data.url("d/x.npy"), data.options, {variable: path})
    assert got.get("error") == "ValueError", got
    assert f"bad object-storage credentials: the shared {name} file {path} ({variable}) is a " \
        f"{kind}, not a regular file" in got["message"], got


@pytest.mark.parametrize("variable, name", [("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
                                            ("AWS_CONFIG_FILE", "config")])
def test_a_shared_file_larger_than_one_mib_is_refused(data: s3_server.Bucket,
                                                      tmp_path: pathlib.Path, variable: str,
                                                      name: str) -> None:
    """The shared files are read whole, by shardload and by the AWS SDK: one of gigabytes
    (a path set wrong, to a data file) took as much memory. Past 1 MiB, which no
    credentials or config file nears, it is refused naming it and its size; at 1 MiB it is
    read."""
    def write(size: int) -> None:
        head = b"[default]\n#"
        big.write_bytes(head + b"x" * (size - len(head) - 1) + b"\n")

    big = tmp_path / name
    write((1 << 20) + 1)
    env = {variable: str(big), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing"}
    got = _load_bounded(data.url("d/x.npy"), data.options, env)
    assert got.get("error") == "ValueError", got
    assert f"bad object-storage credentials: the shared {name} file {big} ({variable}) is " \
        f"{(1 << 20) + 1} bytes, more than the {1 << 20} (1 MiB)" in got["message"], got
    write(1 << 20)
    assert _load_bounded(data.url("d/x.npy"), data.options, env) == {"loaded": WANT}


def test_a_shared_file_that_links_to_a_regular_file_is_read(data: s3_server.Bucket,
                                                           tmp_path: pathlib.Path) -> None:
    """A link to a regular file (dotfiles kept in a repository) is read as that file: its
    keys sign the load, as /dev/null (no file) loads with the options' keys."""
    real = tmp_path / "real-credentials"
    real.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    link = tmp_path / "credentials"
    link.symlink_to(real)
    options = {k: v for k, v in data.options.items() if k not in ("access_key", "secret_key")}
    assert _load_bounded(data.url("d/x.npy"), options,
                         {"AWS_SHARED_CREDENTIALS_FILE": str(link)}) == {"loaded": WANT}
    assert _load_bounded(data.url("d/x.npy"), options,
                         {"AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                          "AWS_ACCESS_KEY_ID": "testing",
                          "AWS_SECRET_ACCESS_KEY": "testing"}) == {"loaded": WANT}


@pytest.mark.parametrize("host", ["LOCALHOST", "Localhost"])
def test_a_container_url_naming_localhost_in_capitals_is_asked(data: s3_server.Bucket,
                                                              host: str) -> None:
    """A host name is case-insensitive: LOCALHOST is localhost, which botocore asks (it
    compares the parsed, lower-cased host); it was refused as "not localhost"."""
    with ContainerEndpoint() as source:
        url = f"http://{host}:{source.port}/creds"
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": url,
                     "AWS_CONTAINER_AUTHORIZATION_TOKEN": "CONTAINERTOKEN"})
        assert got == {"loaded": WANT}, got
        assert [p for p, _ in source.log] == ["/creds"], source.log


_RACE = textwrap.dedent(r"""
    import itertools, json, os, sys, threading, time
    import shardload.numpy
    url, opts, seconds, tmp = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    stop = time.monotonic() + seconds
    loads, errors, count = [0], [], itertools.count(1)
    def reader(me):
        while time.monotonic() < stop:
            n = next(count)
            # A new command each time, so that the process is run for each load.
            with open(f"{tmp}/config.{me}", "w") as f:
                f.write(f"[default]\ncredential_process = {tmp}/creds.sh {n}\n")
            os.replace(f"{tmp}/config.{me}", f"{tmp}/config")
            try:
                got = shardload.numpy.load(url, storage_options=opts)
                assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], got
                loads[0] += 1
            except Exception as e:
                errors.append(str(e)[:400])
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    i = 0
    while time.monotonic() < stop:
        os.environ[f"SHARDLOAD_RACE_{i}"] = "x" * (i % 50)
        i += 1
        if i % 500 == 0:
            for j in range(i - 500, i):
                os.environ.pop(f"SHARDLOAD_RACE_{j}", None)
    for t in threads:
        t.join()
    print(json.dumps({"loads": loads[0], "writes": i, "errors": errors[:3],
                      "nerrors": len(errors)}))
""")


def test_a_credential_process_runs_whole_while_another_thread_writes_the_environment(
        data: s3_server.Bucket, tmp_path: pathlib.Path) -> None:
    """Loads on two threads run a credential_process (a new command each) while the main
    thread adds and removes variables with os.environ. The process was spawned with the live
    ``environ``, which glibc's setenv moves and frees: it was not started ("Bad address") or
    ran without the variables set before (hostile pass 32, B F3). Each run here checks that
    CHECKME, set before the process started, reached it."""
    (tmp_path / "out.json").write_text(json.dumps(KEYS))
    script = tmp_path / "creds.sh"
    script.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\n"
                      '[ "$CHECKME" = yes ] || { echo "env lost" >&2; exit 3; }\n'
                      f"cat {tmp_path / 'out.json'}\n")
    script.chmod(0o755)
    (tmp_path / "config").write_text(f"[default]\ncredential_process = {script}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "config"),
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "CHECKME": "yes"})
    p = subprocess.run([sys.executable, "-c", _RACE, data.url("d/x.npy"),
                        json.dumps(data.options), "4", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["nerrors"] == 0 and got["loads"] > 0, got
    assert _runs(tmp_path) > 1, got  # run again and again (two loads may share a command)


class _RedirectingInstance(contextlib.ExitStack):
    """An instance metadata service on every address of this host that, asked at 127.0.0.1,
    answers the step ``step`` (token, role, creds) with a 307 to the same path at ``elsewhere``
    (standing for another host), where it answers with other keys. Each request is logged:
    method, path, Host and IMDS token headers."""

    def __init__(self, step: str, elsewhere: str) -> None:
        super().__init__()
        self.log: list[tuple[str, str, str, str | None]] = []
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: str, location: str | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                if location is not None:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _any(self) -> None:
                host = self.headers.get("Host") or ""
                service.log.append((self.command, self.path, host,
                                    self.headers.get("X-aws-ec2-metadata-token")))
                there = host.startswith(elsewhere)
                role = "/latest/meta-data/iam/security-credentials/"
                at = {"/latest/api/token": "token", role: "role", role + "myrole": "creds"}
                if at.get(self.path) == step and not there:
                    return self._answer(307, "", f"http://{elsewhere}:{service.port}{self.path}")
                if self.command == "PUT" and self.path == "/latest/api/token":
                    return self._answer(200, "IMDSTOKEN")
                if self.path == role:
                    return self._answer(200, "myrole")
                if self.path == role + "myrole":
                    key = "OTHERKEY" if there else "testing"
                    return self._answer(200, json.dumps(
                        {"Code": "Success", "AccessKeyId": key, "SecretAccessKey": "testing",
                         "Token": "TOK", "Expiration": "2099-01-01T00:00:00Z"}))
                self._answer(404, "not found")

            do_GET = do_PUT = _any  # noqa: N815

        self.httpd = self.enter_context(closing_server.serving(Handler, host="0.0.0.0"))
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"


@pytest.mark.parametrize("step, path", [
    ("token", "/latest/api/token"),
    ("role", "/latest/meta-data/iam/security-credentials/"),
    ("creds", "/latest/meta-data/iam/security-credentials/myrole"),
])
def test_an_instance_metadata_services_redirect_stops_the_load(
        data: s3_server.Bucket, elsewhere: str, step: str, path: str) -> None:
    """The instance metadata service answers a step with a redirect to another host: the load
    is an error naming the service and the redirect, and the other host is asked nothing.
    shardload did not follow it, found none, and Arrow's client then ran the AWS SDK's chain,
    which followed it, sent the session token there and signed with that host's keys
    (hostile pass 32, B F2)."""
    with _RedirectingInstance(step, elsewhere) as service:
        got = _load(data.url("d/x.npy"), data.options,
                    {"AWS_EC2_METADATA_DISABLED": "false",
                     "AWS_EC2_METADATA_SERVICE_ENDPOINT": service.url})
        assert got.get("error") == "ValueError", (got, service.log)
        assert f"the instance metadata service {service.url} " \
            "(AWS_EC2_METADATA_SERVICE_ENDPOINT) gave no credentials: " \
            f"{service.url}{path} answered HTTP 307" in got["message"], got
        assert "(a redirect: not followed)" in got["message"], got
        assert "IMDSTOKEN" not in got["message"]
        assert [entry for entry in service.log if entry[2].startswith(elsewhere)] == [], \
            service.log
