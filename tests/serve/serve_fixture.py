"""Starts and stops `qvl serve` for the server tests.

    with QvlServer("--api-key", "secret") as server:
        server.base_url   # "http://127.0.0.1:PORT/v1", for OpenAI(base_url=...)
        server.health()   # (status, json) of GET /health

The binary comes from $QVL_BINARY and the model folder from $QVL_TEST_MODEL (or the `model` argument). The server is
started on port 0 (it picks a free one and prints `qvl serve: listening on http://127.0.0.1:PORT/v1`), then the
fixture waits for GET /health to answer 200 (the model loaded). Leaving the `with` block sends SIGTERM and asserts
that the server exits with code 0. Its stderr goes to a temporary file, shown in every failure the fixture raises.

Only the standard library is used here.
"""

import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

LISTENING = re.compile(r"^qvl serve: listening on (http://127\.0\.0\.1:(\d+)/v1)\s*$")


def required_env(name):
    """The value of an environment variable the tests cannot run without (CTest sets them)."""
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"${name} is not set: run the server tests through ctest (tests/serve/CMakeLists.txt), "
                           f"or set it by hand")
    return value


class ServerFailed(AssertionError):
    """The server did not start, answer or stop as it should; the message holds the tail of its stderr."""


class QvlServer:
    """One `qvl serve` process on 127.0.0.1, usable as a context manager."""

    def __init__(self, *extra_args, model=None, binary=None, ready_timeout=120.0, listen_timeout=60.0):
        self.binary = binary or required_env("QVL_BINARY")
        self.model = model or required_env("QVL_TEST_MODEL")
        self.model_id = os.path.basename(os.path.normpath(self.model))
        self.args = [self.binary, "serve", "--model", self.model, "--host", "127.0.0.1", "--port", "0",
                     "--device", "cpu", *extra_args]
        self.ready_timeout = ready_timeout
        self.listen_timeout = listen_timeout
        self.process = None
        self.port = None
        self.base_url = None  # http://127.0.0.1:PORT/v1
        self.stdout_lines = []  # every line the server printed on stdout, in order
        self._lines = queue.Queue()
        self._stderr = None
        self._reader = None
        self._stopped = False

    # --- life cycle -------------------------------------------------------------------------------------------------

    def start(self):
        self._stderr = tempfile.TemporaryFile(prefix="qvl-serve-stderr-")
        self.process = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=self._stderr, text=True, encoding="utf-8", errors="replace")
        # stdout is read on a thread for as long as the server runs: a full pipe must never block it.
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        try:
            self._wait_for_listening()
            self._wait_for_health()
        except BaseException as error:
            self._kill()
            self._stopped = True
            self._close_files()
            raise error from None  # the failure names the command and holds the server's output
        return self

    def stop(self, timeout=30.0):
        """SIGTERM, then wait: the server must exit by itself with code 0. Returns the seconds it took."""
        if self.process is None or self._stopped:
            return 0.0
        self._stopped = True
        try:
            if self.process.poll() is not None:
                raise self.failure(f"had exited by itself (code {self.process.returncode}) before it was stopped")
            started = time.monotonic()
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                raise self.failure(f"did not exit within {timeout:.0f} s of SIGTERM (killed)")
            took = time.monotonic() - started
            self._reader.join(5)
            if code != 0:
                raise self.failure(f"exited with code {code} after SIGTERM, not 0")
            return took
        finally:
            self._close_files()

    def __enter__(self):
        return self.start()

    def __exit__(self, kind, error, traceback):
        if kind is None:
            self.stop()
            return False
        try:  # the body failed: still stop the server, but let the body's error be the one reported
            self.stop()
        except AssertionError as stop_error:
            print(f"also: {stop_error}", file=sys.stderr)
        return False

    def _kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._reader is not None:
            self._reader.join(5)

    def _close_files(self):
        if self._reader is not None:
            self._reader.join(5)  # it ends at the end of the output, which the exit closed
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # --- start-up ---------------------------------------------------------------------------------------------------

    def _read_stdout(self):
        for line in self.process.stdout:
            self.stdout_lines.append(line.rstrip("\n"))
            self._lines.put(line)
        self._lines.put(None)  # end of output: the process is exiting

    def _wait_for_listening(self):
        deadline = time.monotonic() + self.listen_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.failure(f"printed no 'qvl serve: listening on' line within {self.listen_timeout:.0f} s")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise self.failure("closed its output before it printed a 'qvl serve: listening on' line")
            match = LISTENING.match(line)
            if match:
                self.base_url = match.group(1)
                self.port = int(match.group(2))
                return

    def _wait_for_health(self):
        deadline = time.monotonic() + self.ready_timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise self.failure(f"exited with code {self.process.returncode} while loading the model")
            try:
                status, body = self.health()
                last = (status, body)
                if status == 200:
                    return
                if status != 503:
                    raise self.failure(f"GET /health answered {status} while loading (expected 503, then 200): {body}")
            except (ConnectionError, http.client.HTTPException, OSError) as error:
                last = error
            time.sleep(0.05)
        raise self.failure(f"GET /health did not answer 200 within {self.ready_timeout:.0f} s (last: {last!r})")

    # --- use --------------------------------------------------------------------------------------------------------

    @property
    def pid(self):
        return self.process.pid

    @property
    def root_url(self):
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=60.0):
        """One raw HTTP request. Returns (status, headers as a dict with lower-case names, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest(method, path)
            all_headers = dict(headers or {})
            if body is not None:
                all_headers.setdefault("Content-Type", "application/json")
                all_headers["Content-Length"] = str(len(body))
            for name, value in all_headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            if body is not None:
                try:
                    conn.send(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a server may answer (413) and close before it has read a large body: read its answer
            response = conn.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            conn.close()

    def request_json(self, method, path, body=None, headers=None, timeout=60.0):
        """A raw request whose answer is JSON: (status, headers, parsed body). `body` may be bytes or a JSON value."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        status, response_headers, data = self.request(method, path, body, headers, timeout)
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            raise self.failure(f"{method} {path} answered {status} with a body that is not JSON: {data[:300]!r}")
        return status, response_headers, parsed

    def health(self):
        status, _, body = self.request_json("GET", "/health", timeout=10.0)
        return status, body

    def wait_until_idle(self, timeout=20.0):
        """Waits until no request runs or waits (an earlier test's cancelled stream may still be winding down)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.health()
            if status == 200 and body["queue"]["running"] == 0 and body["queue"]["waiting"] == 0:
                return
            if time.monotonic() > deadline:
                raise self.failure(f"the server stayed busy for {timeout} s: {body}")
            time.sleep(0.05)

    def rss_kib(self):
        """The server's resident memory (VmRSS) in KiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise self.failure("/proc/PID/status has no VmRSS line")

    def stderr_tail(self, limit=6000):
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def failure(self, what):
        """A ServerFailed naming the command and showing the server's output."""
        command = " ".join(self.args)
        stdout = "\n".join(self.stdout_lines[-20:])
        return ServerFailed(f"qvl serve {what}\n  command: {command}\n--- stdout ---\n{stdout}\n"
                            f"--- stderr ---\n{self.stderr_tail()}")
