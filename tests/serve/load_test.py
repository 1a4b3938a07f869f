"""qvl serve under load, and a client that hangs up mid-answer.

1. Load: 8 client threads send 200 short requests in all (max_tokens 8, greedy; streaming and not, with and without
   the sample picture) to a server with a small queue. Every request must be answered (200, the same answer as every
   other request of its kind) or refused with 503 and a Retry-After header. The server's resident memory (VmRSS)
   after the first 50 requests and after all of them must differ by less than --rss-growth-mb. The server must still
   be healthy and idle at the end, and exit with code 0 on SIGTERM.
2. Drop: on a random-weight model, which never ends its answer early, a streaming request for thousands of tokens
   is cut by the client (raw http.client: first content chunk read, socket closed). The time until GET /health shows
   nothing running must be under --drop-bound-s. Then SIGTERM during a long answer: exit code 0, and how long it took.

One JSON line of measurements is printed at the end; the exit code is 0 only when every check passed.

Environment: QVL_BINARY, QVL_TEST_MODEL (the demo model, demo-shapes), QVL_TEST_SAMPLES (default: this source
tree's resources/samples), and QVL_TEST_RANDOM_MODEL: the random-weight model for the drop test (default:
$QVL_RESOURCE_DIR/models/demo-tiny, which the build makes with `qvl make-random-model --preset demo-tiny`; any
folder from `qvl make-random-model` works).
"""

import argparse
import base64
import http.client
import json
import math
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import openai  # noqa: E402
from openai import OpenAI  # noqa: E402

from serve_fixture import QvlServer, required_env  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.environ.get("QVL_TEST_SAMPLES") or os.path.join(SOURCE_DIR, "resources", "samples")
QUESTION = "What shapes do you see?"


class Checks:
    """Named pass/fail results; every failure is printed as it happens."""

    def __init__(self):
        self.failed = []
        self.passed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"FAILED: {what}", file=sys.stderr, flush=True)
        return ok


def random_model_dir():
    folder = os.environ.get("QVL_TEST_RANDOM_MODEL")
    if not folder:
        resources = os.environ.get("QVL_RESOURCE_DIR") or os.path.dirname(os.path.dirname(
            os.path.normpath(required_env("QVL_TEST_MODEL"))))
        folder = os.path.join(resources, "models", "demo-tiny")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise RuntimeError(f"the drop test needs a random-weight model, and {folder} is none: set "
                           f"$QVL_TEST_RANDOM_MODEL to a folder made by `qvl make-random-model --preset demo-tiny "
                           f"--out DIR` (the build makes resources/models/demo-tiny)")
    return folder


# --- 1. load --------------------------------------------------------------------------------------------------------


class LoadRun:
    def __init__(self, server, requests, threads, picture_url):
        self.server = server
        self.total = requests
        self.threads = threads
        self.picture_url = picture_url
        self.lock = threading.Lock()
        self.next_index = 0
        self.done = 0
        self.answered = 0
        self.refused = 0
        self.refused_without_retry_after = 0
        self.errors = []  # (index, what)
        self.answers = {}  # kind -> {text: count}
        self.rss_after_50 = None
        self.rss_end = None

    def messages(self, with_picture):
        if not with_picture:
            return [{"role": "user", "content": QUESTION}]
        return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": self.picture_url}},
                                             {"type": "text", "text": QUESTION}]}]

    def take(self):
        with self.lock:
            if self.next_index >= self.total:
                return None
            self.next_index += 1
            return self.next_index - 1

    def finished_one(self):
        with self.lock:
            self.done += 1
            done = self.done
        if done == 50:
            self.rss_after_50 = self.server.rss_kib()

    def one(self, client, index):
        with_picture = index % 4 in (0, 3)
        stream = index % 2 == 1
        kind = ("picture" if with_picture else "text")
        try:
            if stream:
                chunks = list(client.chat.completions.create(model="qvl", messages=self.messages(with_picture),
                                                             temperature=0, max_tokens=8, stream=True))
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                if finish not in (["stop"], ["length"]):
                    raise AssertionError(f"streamed finish reasons {finish}")
            else:
                response = client.chat.completions.create(model="qvl", messages=self.messages(with_picture),
                                                          temperature=0, max_tokens=8)
                text = response.choices[0].message.content
                if not 1 <= response.usage.completion_tokens <= 8:
                    raise AssertionError(f"completion_tokens {response.usage.completion_tokens} with max_tokens 8")
            with self.lock:
                self.answered += 1
                counts = self.answers.setdefault(kind, {})
                counts[text] = counts.get(text, 0) + 1
        except openai.APIStatusError as error:
            if error.status_code != 503:
                with self.lock:
                    self.errors.append((index, f"status {error.status_code}: {error.response.text[:300]}"))
                return
            retry_after = error.response.headers.get("retry-after")
            with self.lock:
                self.refused += 1
                if retry_after is None or not retry_after.strip().isdigit():
                    self.refused_without_retry_after += 1
            # A polite client would wait Retry-After seconds; a shorter pause keeps the run short and the queue full.
            time.sleep(0.2)
        except Exception as error:  # noqa: BLE001 (any other failure is this request's error, reported below)
            with self.lock:
                self.errors.append((index, f"{type(error).__name__}: {error}"))
        finally:
            self.finished_one()

    def worker(self):
        with OpenAI(base_url=self.server.base_url, api_key="unused", max_retries=0, timeout=120) as client:
            while (index := self.take()) is not None:
                self.one(client, index)

    def run(self):
        started = time.monotonic()
        workers = [threading.Thread(target=self.worker, name=f"client-{i}") for i in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.rss_end = self.server.rss_kib()
        return time.monotonic() - started


def load_phase(args, checks, summary):
    with open(os.path.join(SAMPLES, "scene-1.png"), "rb") as f:
        picture_url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    with QvlServer("--queue", str(args.queue)) as server:
        run = LoadRun(server, args.requests, args.threads, picture_url)
        wall = run.run()
        growth_mib = (run.rss_end - run.rss_after_50) / 1024
        summary.update(load_requests=args.requests, load_threads=args.threads, queue=args.queue,
                       answered=run.answered, refused_503=run.refused, errors=len(run.errors),
                       load_wall_s=round(wall, 2), rss_mib_after_50=round(run.rss_after_50 / 1024, 1),
                       rss_mib_end=round(run.rss_end / 1024, 1), rss_growth_mib=round(growth_mib, 2),
                       rss_growth_limit_mib=args.rss_growth_mb)
        for index, what in run.errors[:10]:
            print(f"request {index}: {what}", file=sys.stderr)
        checks.check(not run.errors, f"{len(run.errors)} of {args.requests} requests neither answered nor refused "
                                     f"with 503")
        checks.check(run.answered + run.refused + len(run.errors) == args.requests, "every request accounted for")
        checks.check(run.answered >= args.requests // 4,
                     f"only {run.answered} of {args.requests} requests answered (the rest refused)")
        checks.check(run.refused_without_retry_after == 0,
                     f"{run.refused_without_retry_after} 503 answers without a Retry-After header (in seconds)")
        for kind, texts in run.answers.items():
            checks.check(len(texts) == 1, f"greedy {kind} requests gave different answers under load: {texts}")
        checks.check(growth_mib < args.rss_growth_mb,
                     f"resident memory grew {growth_mib:.1f} MiB from request 50 to request {args.requests} "
                     f"(limit {args.rss_growth_mb} MiB)")
        status, health = server.health()
        checks.check(status == 200 and health.get("status") == "ok", f"healthy after the load: {status} {health}")
        queue = health.get("queue", {})
        checks.check(queue.get("running") == 0 and queue.get("waiting") == 0, f"idle after the load: {queue}")
    # Leaving the block stopped the server with SIGTERM and checked its exit code (0).


# --- 2. a client that hangs up ------------------------------------------------------------------------------------


def idle(server):
    status, health = server.health()
    queue = health.get("queue", {}) if isinstance(health, dict) else {}
    return status == 200 and queue.get("running") == 0 and queue.get("waiting") == 0


def wait_until(predicate, timeout, step=0.005):
    """Seconds until predicate() held, or None after `timeout` seconds."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(step)
    return None


def long_request_body(max_tokens, stream):
    return {"model": "qvl", "messages": [{"role": "user", "content": "Tell me everything you know."}],
            "temperature": 0, "max_tokens": max_tokens, "stream": stream}


def drop_after_first_chunk(server, max_tokens):
    """Streams a long answer, reads up to its first content delta, then closes the socket. Returns the seconds from
    the close until the server is idle (None: not within 30 s) and whether it was running just before the close."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(long_request_body(max_tokens, True)),
                 {"Content-Type": "application/json"})
    sock = conn.sock
    response = conn.getresponse()
    if response.status != 200:
        raise AssertionError(f"the long streaming request was answered {response.status}: {response.read()[:300]}")
    buffer = b""
    while True:
        piece = response.read1(4096)
        if not piece:
            raise AssertionError("the stream ended before its first content chunk")
        buffer += piece.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        buffer = events.pop()  # an incomplete event stays
        if any(has_content(event) for event in events):
            break
    _, health = server.health()
    was_running = health.get("queue", {}).get("running") == 1
    sock.shutdown(socket.SHUT_RDWR)  # the hang-up: FIN now, whatever else holds the socket
    response.close()
    conn.close()
    sock.close()
    return wait_until(lambda: idle(server), 30.0, step=0.001), was_running


def has_content(event):
    for line in event.split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            chunk = json.loads(line[5:])
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                return True
    return False


def timed_answer(client, max_tokens):
    started = time.monotonic()
    response = client.chat.completions.create(model="qvl", messages=long_request_body(1, False)["messages"],
                                              temperature=0, max_tokens=max_tokens)
    return time.monotonic() - started, response


def drop_phase(args, checks, summary):
    model = random_model_dir()
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    positions = config.get("text_config", config)["max_position_embeddings"]
    server = QvlServer("--max-context", "32768", model=model).start()
    try:
        client = OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)
        # How fast this model decodes here, and that it does not end its answer early.
        timed_answer(client, 4)  # warm-up
        short_s, _ = timed_answer(client, 16)
        long_s, long_answer = timed_answer(client, 144)
        if long_answer.choices[0].finish_reason != "length":
            raise AssertionError(f"{model} ended its answer after {long_answer.usage.completion_tokens} tokens: the "
                                 f"drop test needs a random-weight model that runs to max_tokens")
        per_token_s = max((long_s - short_s) / 128, 1e-5)
        room = min(positions, 32768) - long_answer.usage.prompt_tokens - 8
        max_tokens = min(room, max(2000, math.ceil(10 * args.drop_bound_s / per_token_s)))
        uncut_s = max_tokens * per_token_s
        summary.update(drop_model=os.path.basename(os.path.normpath(model)), per_token_ms=round(per_token_s * 1e3, 3),
                       drop_max_tokens=max_tokens, drop_uncut_estimate_s=round(uncut_s, 1),
                       drop_bound_s=args.drop_bound_s)
        if uncut_s < 5 * args.drop_bound_s:
            raise AssertionError(f"an uncut answer of {max_tokens} tokens would take only {uncut_s:.2f} s here, too "
                                 f"short to show a stop within {args.drop_bound_s} s (a faster model than expected)")

        times = []
        for attempt in range(3):
            took, was_running = drop_after_first_chunk(server, max_tokens)
            checks.check(was_running, f"drop {attempt}: /health did not show the request running before the hang-up")
            checks.check(took is not None, f"drop {attempt}: the server still ran the request 30 s after the hang-up")
            times.append(took if took is not None else float("inf"))
            if times[-1] >= args.drop_bound_s:
                break  # once is enough to fail; the next tries would only wait as long again
        summary["drop_to_idle_s"] = [round(t, 4) for t in times]
        summary["drop_to_idle_tokens"] = [round(t / per_token_s, 1) for t in times]
        checks.check(max(times) < args.drop_bound_s,
                     f"a dropped stream stopped after {max(times):.3f} s, over the bound of {args.drop_bound_s} s")
        # In tokens: the write after the hang-up still succeeds, the next fails and the engine stops after that
        # token; 10 ms more for the /health polls that see it (each a request of its own, 1 ms apart).
        token_bound_s = args.drop_bound_tokens * per_token_s + 0.010
        checks.check(max(times) < token_bound_s,
                     f"a dropped stream stopped after {max(times) / per_token_s:.1f} tokens' time ({max(times):.4f} s), "
                     f"over {args.drop_bound_tokens} tokens + 10 ms ({token_bound_s:.4f} s)")
        _, after = timed_answer(client, 4)
        checks.check(after.usage.completion_tokens == 4, "the server answers normally after the hang-ups")

        # SIGTERM in the middle of a long answer: the server finishes its token and exits with code 0.
        outcome = {}

        def long_answer_thread():
            try:
                outcome["response"] = client.chat.completions.create(
                    model="qvl", messages=long_request_body(1, False)["messages"], temperature=0, max_tokens=max_tokens)
            except Exception as error:  # noqa: BLE001 (a cut connection is an acceptable end here)
                outcome["error"] = error

        thread = threading.Thread(target=long_answer_thread)
        thread.start()
        running = wait_until(lambda: server.health()[1].get("queue", {}).get("running") == 1, 30.0)
        checks.check(running is not None, "the long request never showed as running")
        time.sleep(0.2)
        sigterm_s = server.stop()  # asserts exit code 0
        thread.join(60)
        summary["sigterm_exit_s"] = round(sigterm_s, 3)
        checks.check(sigterm_s < args.sigterm_bound_s,
                     f"exit after SIGTERM took {sigterm_s:.2f} s (bound {args.sigterm_bound_s} s)")
    finally:
        if server.process.poll() is None:  # a check above raised before the SIGTERM test: still stop the server
            try:
                server.stop()
            except AssertionError as error:
                print(f"also: {error}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--queue", type=int, default=4, help="qvl serve --queue: fewer than the threads, so some "
                                                              "requests are refused with 503")
    parser.add_argument("--rss-growth-mb", type=float, default=16.0,
                        help="resident memory growth allowed from request 50 to the end (MiB)")
    parser.add_argument("--drop-bound-tokens", type=float, default=4.0,
                        help="a hang-up frees the engine within this many tokens' time (+ 10 ms of polling)")
    parser.add_argument("--drop-bound-s", type=float, default=2.0,
                        help="seconds from a client's hang-up until the server is idle")
    parser.add_argument("--sigterm-bound-s", type=float, default=10.0,
                        help="seconds from SIGTERM during a long answer until the server has exited")
    parser.add_argument("--skip-load", action="store_true", help="only the drop and SIGTERM tests")
    parser.add_argument("--skip-drop", action="store_true", help="only the load test")
    args = parser.parse_args()
    if args.requests < 100:
        parser.error("--requests must be at least 100 (memory is compared after request 50 and at the end)")

    checks, summary = Checks(), {}
    try:
        if not args.skip_load:
            load_phase(args, checks, summary)
        if not args.skip_drop:
            drop_phase(args, checks, summary)
    finally:
        print(json.dumps({"serve_load_test": summary}), flush=True)
    if checks.failed:
        print(f"load test: {len(checks.failed)} check(s) failed", file=sys.stderr)
        return 1
    print(f"load test: all {checks.passed} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
