"""A process forked while its parent's threads read (a DataLoader's workers, multiprocessing's
"fork"): what those threads held at the fork is not the child's to wait for.

Each case runs in a script of its own (a hang there is its alarm, not this test run's): a local
server holds a GET open until told, so the parent's read is in flight when the main thread forks.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SERVER = """
import io, os, signal, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import numpy as np
import shardload, shardload.numpy as sn

OBJECTS = {}
CONNECTIONS = []
started, release = threading.Event(), threading.Event()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def answer(self, body):
        data = OBJECTS[self.path.split("?")[0]]
        first, last, code = 0, len(data) - 1, 200
        if self.headers.get("Range"):
            a, z = self.headers["Range"].split("=")[1].split("-")
            first, last, code = int(a), min(int(z), len(data) - 1), 206
        hold = (body and code == 206 and self.path.startswith(globals().get("SLOW_PREFIX", "/slow"))
                and first >= SLOW_FROM)
        if self.path in globals().get("HOLD_ONCE", ()) and not started.is_set():
            hold = True  # the first request for it only
        if hold:
            started.set()
            release.wait(60)
        self.send_response(code)
        self.send_header("ETag", '"v1"')
        self.send_header("Content-Length", str(last + 1 - first))
        if code == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.end_headers()
        if body: self.wfile.write(data[first:last + 1])
    def do_GET(self):
        CONNECTIONS.append(self.client_address)  # which connection each GET came on
        self.answer(True)
    def do_HEAD(self): self.answer(False)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()
URL = f"http://127.0.0.1:{server.server_address[1]}"

def fork_while_in_flight(read_in_parent, read_in_child, end_child=lambda: os._exit(0)):
    result = {}
    t = threading.Thread(target=lambda: result.update(parent=read_in_parent()), daemon=True)
    t.start()
    assert started.wait(60)
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hang ends here, as a signal the parent reports
        try:
            got = read_in_child()
            print("child:", "read", got.shape, flush=True)
        except Exception as e:
            print("child:", type(e).__name__, e, flush=True)
        end_child()
    _, status = os.waitpid(pid, 0)
    release.set()
    t.join(60)
    print("child status:", "signal" if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    return result["parent"]
"""


def run(body: str) -> str:
    script = SERVER + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("max_requests", [1, 4])
def test_a_child_forked_while_the_parent_holds_every_request_slot_gets_its_own(max_requests):
    """The parent's reads held every request slot of the store (max_requests) at the fork: the
    child waited forever for slots no thread of its own would give back (pass 13, fault 8).
    The child's stores are its own: it loads."""
    out = run(f"""
        SLOW_FROM = 0
        a = np.arange(4000, dtype=np.float32).reshape(1000, 4)
        buf = io.BytesIO(); np.save(buf, a)
        for name in ["/fast.npy"] + [f"/slow{{i}}.npy" for i in range({max_requests})]:
            OBJECTS[name] = buf.getvalue()
        q = "?max_requests={max_requests}"
        sn.load([URL + "/fast.npy" + q])  # the store made in the parent
        slow = [URL + f"/slow{{i}}.npy" + q for i in range({max_requests})]
        got = fork_while_in_flight(
            lambda: sn.load(slow, threads={max(4, max_requests)}, overdecompose=1),
            lambda: sn.load([URL + "/fast.npy" + q], threads=2))
        assert (got == np.concatenate([a] * {max_requests})).all()
        """)
    assert "child: read (1000, 4)" in out and "child status: 0" in out, out


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_a_child_never_sends_on_its_parents_connections(scheme):
    """A child forked after its parent's reads copied the parent's idle connections and sent
    its requests on them: sockets the parent still uses, so an answer could reach the process
    that did not ask (the other's bytes, or a wait behind a held answer: the hang the s3 case
    below showed when a parent thread took the connection after the fork). The child opens its
    own; the parent's stay the parent's."""
    out = run(f"""
        a = np.arange(4000, dtype=np.float32).reshape(1000, 4)
        buf = io.BytesIO(); np.save(buf, a)
        OBJECTS["/x.npy"] = OBJECTS["/bkt/x.npy"] = buf.getvalue()
        if {scheme!r} == "http":
            load = lambda: sn.load([URL + "/x.npy"])
        else:
            opts = dict(endpoint_override=URL.split("//")[1], scheme="http",
                        region="us-east-1", access_key="AKIATEST", secret_key="testsecret")
            load = lambda: sn.load(["s3://bkt/x.npy"], storage_options=opts)
        assert (load() == a).all()
        parents, n = set(CONNECTIONS), len(CONNECTIONS)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)
            os._exit(0 if (load() == a).all() else 3)
        _, status = os.waitpid(pid, 0)
        childs = set(CONNECTIONS[n:])
        print("child status:", os.waitstatus_to_exitcode(status), "gets:", len(childs),
              "on the parent's:", len(childs & parents))
        assert (load() == a).all()  # and the parent's own connections still answer it
        """)
    assert "child status: 0" in out and "on the parent's: 0" in out, out
    assert "gets: 0 " not in out, out


@pytest.mark.parametrize("max_requests", [1, 4])
def test_a_child_forked_while_the_parent_holds_every_s3_request_slot_gets_its_own(max_requests):
    """As over http, on s3:// (the signed path): the s3 driver kept its own map of the stores
    it had made, so the child found the parent's, every slot taken, and waited forever
    (pass 14, fault 5). Its stores are now its own: it loads."""
    out = run(f"""
        SLOW_FROM, SLOW_PREFIX = 0, "/bkt/slow"
        a = np.arange(4000, dtype=np.float32).reshape(1000, 4)
        buf = io.BytesIO(); np.save(buf, a)
        for name in ["/bkt/fast.npy"] + [f"/bkt/slow{{i}}.npy" for i in range({max_requests})]:
            OBJECTS[name] = buf.getvalue()
        opts = dict(endpoint_override=URL.split("//")[1], scheme="http", region="us-east-1",
                    access_key="AKIATEST", secret_key="testsecret", max_requests={max_requests})
        sn.load(["s3://bkt/fast.npy"], storage_options=opts)  # the store made in the parent
        slow = [f"s3://bkt/slow{{i}}.npy" for i in range({max_requests})]
        got = fork_while_in_flight(
            lambda: sn.load(slow, storage_options=opts, threads={max(4, max_requests)},
                            overdecompose=1),
            lambda: sn.load(["s3://bkt/fast.npy"], storage_options=opts, threads=2))
        assert (got == np.concatenate([a] * {max_requests})).all()
        """)
    assert "child: read (1000, 4)" in out and "child status: 0" in out, out


def test_a_child_forked_while_the_parent_fetches_role_credentials_fetches_its_own():
    """A parent thread's first s3:// open fetched the role's credentials (a container's
    endpoint, slow to answer) at the fork: the child copied the lock held across that fetch,
    and the s3 driver's lock held across the store's making, and its own first s3:// open
    waited forever (pass 14, fault 4). It now makes its own: its open fails at once (the
    endpoint is a closed port), and the parent's ends as it would have."""
    out = run("""
        import json
        SLOW_FROM = 0
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "AWS_PROFILE"):
            os.environ.pop(k, None)
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.environ["AWS_CONFIG_FILE"] = "/none"
        os.environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = URL + "/creds"
        OBJECTS["/creds"] = json.dumps({"AccessKeyId": "AKIAROLE", "Token": "roletoken1",
                                        "SecretAccessKey": "rolesecret1",
                                        "Expiration": "2099-01-01T00:00:00Z"}).encode()
        HOLD_ONCE = ("/creds",)
        opts = dict(endpoint_override="127.0.0.1:9", scheme="http", region="us-east-1",
                    max_attempts=1)
        def parent():
            try:
                shardload.discover("s3://bkt/d/x.npy", storage_options=opts)
            except shardload.Error as e:
                return str(e)
        said = fork_while_in_flight(
            parent, lambda: shardload.discover("s3://bkt/d/y.npy", storage_options=opts))
        print("parent:", said)
        """)
    assert "child status: 0" in out, out
    assert "child: ShardReadError s3://bkt/d/y.npy" in out, out
    assert "parent: s3://bkt/d/x.npy" in out, out


def test_a_child_forked_during_an_hdf5_read_refuses_hdf5_instead_of_hanging(tmp_path):
    """A parent thread was inside HDF5 (a remote read, the chunk's GET held open) at the fork:
    the child copied HDF5's lock held, and its first HDF5 read, of a local file, waited forever
    (pass 13, fault 8). It now fails at once, saying why and what to do; the parent's read ends
    as h5py reads the file, and a child forked with no HDF5 call in flight reads HDF5."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    a = np.random.default_rng(1).standard_normal((20000, 16)).astype(np.float32)
    with h5py.File(tmp_path / "r.h5", "w") as f:  # fletcher32: read by H5Dread, under HDF5
        f.create_dataset("x", data=a, chunks=(1000, 16), compression="gzip", fletcher32=True)
    with h5py.File(tmp_path / "local.h5", "w") as f:
        f.create_dataset("x", data=a[:10])
    out = run(f"""
        SLOW_FROM = 300000  # past the first 256 KiB, which the open fetches outside HDF5
        OBJECTS["/slow.h5"] = open({str(tmp_path / "r.h5")!r}, "rb").read()
        local = {str(tmp_path / "local.h5")!r}
        got = fork_while_in_flight(
            lambda: sn.load([URL + "/slow.h5"], format="hdf5", dataset="x", threads=1),
            lambda: sn.load([local], format="hdf5", dataset="x"))
        import h5py
        with h5py.File({str(tmp_path / "r.h5")!r}) as f:
            assert (got == f["x"][()]).all()
        pid = os.fork()  # no HDF5 call in flight now
        if pid == 0:
            print("second child:", sn.load([local], format="hdf5", dataset="x").shape, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        """)
    assert "child status: 0" in out, out
    assert ("HDF5 cannot be used in this process: it was forked (a DataLoader worker, "
            "multiprocessing's 'fork') while another thread was inside HDF5" in out), out
    assert "second child: (10, 16)" in out, out


@pytest.mark.parametrize("child_reads", [True, False])
def test_a_child_forked_during_an_hdf5_read_ends_through_a_normal_exit(tmp_path, child_reads):
    """The child of the case above, refused HDF5, then ended through the interpreter's normal
    exit (sys.exit, the script's end; not os._exit, which DataLoader's workers use): HDF5's
    exit handler took the lock the fork had copied held, and the child never ended, even
    when it had made no HDF5 call (pass 14, fault 9). It ends; the parent's read is whole."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    a = np.random.default_rng(2).standard_normal((20000, 16)).astype(np.float32)
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f.create_dataset("x", data=a, chunks=(1000, 16), compression="gzip", fletcher32=True)
    with h5py.File(tmp_path / "local.h5", "w") as f:
        f.create_dataset("x", data=a[:10])
    out = run(f"""
        SLOW_FROM = 300000
        OBJECTS["/slow.h5"] = open({str(tmp_path / "r.h5")!r}, "rb").read()
        local = {str(tmp_path / "local.h5")!r}
        def in_child():
            if {child_reads!r}:
                return sn.load([local], format="hdf5", dataset="x")
            return np.zeros((0,))
        got = fork_while_in_flight(
            lambda: sn.load([URL + "/slow.h5"], format="hdf5", dataset="x", threads=1),
            in_child, end_child=lambda: sys.exit(0))
        import h5py
        with h5py.File({str(tmp_path / "r.h5")!r}) as f:
            assert (got == f["x"][()]).all()
        print("parent read it whole")
        """)
    assert "child status: 0" in out and "parent read it whole" in out, out
    if child_reads:
        assert "child: LayoutError" in out and "forked" in out, out



def test_a_child_forked_while_parent_threads_are_inside_arrows_s3_client_loads():
    """Arrow's S3 clients share a process-wide lock, held by every request in flight: a child
    forked while parent threads' requests held it waited for ever at its own first client (pass
    16, fault 7: every child, with an option only Arrow's client takes). The fork now waits for
    the requests in flight (the server is another process), and every child loads."""
    script = textwrap.dedent("""
        import io, os, signal, sys, threading
        sys.path.insert(0, {tests!r})
        import boto3, numpy as np
        import s3_server
        import shardload.numpy as sn
        a = np.arange(40000, dtype=np.float32).reshape(10000, 4)
        with s3_server.serving() as ep:
            c = boto3.client("s3", endpoint_url=f"http://{{ep}}", region_name="us-east-1")
            c.create_bucket(Bucket="bkt")
            b = io.BytesIO(); np.save(b, a)
            for i in range(4):
                c.put_object(Bucket="bkt", Key=f"d/shard_{{i:04d}}.npy", Body=b.getvalue())
            # An option only Arrow's client takes: every request goes through it.
            so = dict(endpoint_override=ep, scheme="http", region="us-east-1", access_key="AK",
                      secret_key="SK", allow_bucket_deletion="false")
            def loop():
                while True:
                    sn.load("s3://bkt/d/", storage_options=so, threads=2)
            for _ in range(3):
                threading.Thread(target=loop, daemon=True).start()
            for i in range(6):
                pid = os.fork()
                if pid == 0:
                    signal.alarm(30)  # a hang ends here, as a signal
                    got = sn.load("s3://bkt/d/", storage_options=so)
                    os._exit(0 if (got == np.concatenate([a] * 4)).all() else 3)
                _, status = os.waitpid(pid, 0)
                print("child status:", os.waitstatus_to_exitcode(status), flush=True)
        """).format(tests=str(__import__("pathlib").Path(__file__).parent))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=400)
    statuses = [line for line in r.stdout.splitlines() if line.startswith("child status:")]
    assert statuses == ["child status: 0"] * 6, r.stdout + r.stderr[-3000:]


def test_a_child_forked_while_a_parent_request_inside_arrows_s3_client_never_ends_refuses_it():
    """Where a request in flight in Arrow's client does not end while the fork waits (here the
    server answers from the forking process itself, which cannot serve while it forks), the fork
    goes ahead after the wait and the child refuses Arrow's client, naming why, instead of
    waiting for ever on the lock it copied held."""
    out = run("""
        SLOW_FROM, SLOW_PREFIX = 0, "/bkt/slow"
        a = np.arange(4000, dtype=np.float32).reshape(1000, 4)
        buf = io.BytesIO(); np.save(buf, a)
        OBJECTS["/bkt/fast.npy"] = OBJECTS["/bkt/slow0.npy"] = buf.getvalue()
        opts = dict(endpoint_override=URL.split("//")[1], scheme="http", region="us-east-1",
                    access_key="AKIATEST", secret_key="testsecret",
                    allow_bucket_deletion="false")
        sn.load(["s3://bkt/fast.npy"], storage_options=opts)
        got = fork_while_in_flight(
            lambda: sn.load(["s3://bkt/slow0.npy"], storage_options=opts),
            lambda: sn.load(["s3://bkt/fast.npy"], storage_options=opts))
        assert (got == a).all()
        """)
    assert "child status: 0" in out, out
    assert "it was forked while another thread of its parent was inside Arrow's S3" in out, out


# A server that accepts and never answers: a call into Arrow's S3 client that does not end.
SILENT_S3 = """
import os, socket, sys, threading, time
import shardload
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(16); held = []
threading.Thread(target=lambda: [held.append(ls.accept()) for _ in iter(int, 1)],
                 daemon=True).start()
# An option only Arrow's client takes: the daemon's listing is a call into it.
so = dict(endpoint_override=f"127.0.0.1:{ls.getsockname()[1]}", scheme="http",
          region="us-east-1", access_key="AK", secret_key="SK", request_timeout="600",
          allow_bucket_deletion="false")
def stuck():
    try: shardload.discover("s3://bkt/d/", storage_options=so)
    except Exception as e: print("daemon:", e, flush=True)
threading.Thread(target=stuck, daemon=True).start()
time.sleep(1.0)
"""


def test_a_program_ending_while_a_daemon_thread_is_stuck_in_arrows_s3_client_ends_cleanly():
    """At the end S3 is finalized only once the calls in flight into Arrow's client end (up to
    5 s); past that the static destructors tore S3 down under the stuck call and the process
    crashed (SIGSEGV) instead of ending with the program's status. Now it ends with that status,
    its buffered output written (C stdio's too) and Python's atexit functions run."""
    script = SILENT_S3 + textwrap.dedent("""
        import atexit, ctypes
        atexit.register(lambda: print("atexit ran"))
        libc = ctypes.CDLL(None)
        libc.printf(b"c stdio buffered\\n")  # a pipe: held in C's buffer until the end
        print("python buffered")
        sys.exit(3)
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "python buffered" in r.stdout and "atexit ran" in r.stdout, r.stdout
    assert "c stdio buffered" in r.stdout, r.stdout


def test_a_child_forked_past_the_wait_for_arrows_s3_client_ends_with_its_status():
    """A child forked while a parent thread's call into Arrow's client did not end (the fork
    goes ahead after 10 s) holds that client's lock copied held: it never finalizes S3, and its
    exit then crashed in the static destructors (SIGSEGV, here and there). It ends with its
    status."""
    script = SILENT_S3 + textwrap.dedent("""
        pid = os.fork()
        if pid == 0:
            signal = __import__("signal"); signal.alarm(30)
            try: shardload.discover("s3://bkt/e/", storage_options=so)
            except Exception as e: print("child:", type(e).__name__, flush=True)
            sys.exit(5)
        _, status = os.waitpid(pid, 0)
        print("child status:", os.waitstatus_to_exitcode(status), flush=True)
        os._exit(0)
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60)
    assert "child: LayoutError" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "child status: 5" in r.stdout, r.stdout + r.stderr[-2000:]
