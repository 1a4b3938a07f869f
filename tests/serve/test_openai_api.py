"""qvl serve through the official OpenAI client, end to end: answers equal to `qvl generate`, sampling, stop strings,
limits, streaming, the conversation cache, and every error the API promises.

Run by CTest (tests/serve/CMakeLists.txt) as `PYTHON tests/serve/test_openai_api.py`, or by hand:

    QVL_BINARY=build/release/app/qvl QVL_TEST_MODEL=build/release/resources/models/demo-shapes \\
        build/release/python-env/bin/python -m unittest discover -s tests/serve -p 'test_*.py' -v

Environment: QVL_BINARY (the qvl executable), QVL_TEST_MODEL (the demo model folder, demo-shapes), and optionally
QVL_TEST_SAMPLES (the sample pictures and answers.json; default: resources/samples of this source tree).
Two servers are started: one with the defaults, one with tight limits, an API key and --allow-local-files.
"""

import base64
import gzip
import http.client
import http.server
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import openai  # noqa: E402  (after the path: serve_fixture sits beside this file)
from openai import OpenAI  # noqa: E402

from serve_fixture import QvlServer, required_env  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.environ.get("QVL_TEST_SAMPLES") or os.path.join(SOURCE_DIR, "resources", "samples")
SCENE = os.path.join(SAMPLES, "scene-1.png")
QUESTION = "What shapes do you see?"
# qvl generate's stop_reason -> the API's finish_reason.
FINISH_REASON = {"eos": "stop", "max_new_tokens": "length"}


def transformers_answer(image_name, question):
    with open(os.path.join(SAMPLES, "answers.json")) as f:
        for entry in json.load(f):
            if entry["image"] == image_name and entry["question"] == question:
                return entry["transformers"]
    raise LookupError(f"answers.json has no answer for {image_name} / {question!r}")


# --- pictures -----------------------------------------------------------------------------------------------------


def _png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width, height, colour=(200, 40, 40)):
    """A real RGB PNG of one colour."""
    row = b"\x00" + bytes(colour) * width  # filter byte 0 (none), then the pixels
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(row * height)) + _png_chunk(b"IEND", b""))


def png_header_only(width, height):
    """A PNG whose header says width x height and that holds no pixels: only a server that checks the size before
    decoding can name the pixel limit for it (decoding would find the data missing)."""
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _png_chunk(b"IEND", b""))


def data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode()


class Image:
    """A picture in a conversation: sent to the server as a data URL, handed to qvl generate as its file."""

    def __init__(self, path):
        self.path = os.path.abspath(path)

    def url(self):
        with open(self.path, "rb") as f:
            return data_url(f.read())


def openai_messages(conversation):
    """[(role, text | [text | Image, ...]), ...] as the OpenAI API's messages."""
    out = []
    for role, content in conversation:
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        parts = [{"type": "image_url", "image_url": {"url": item.url()}} if isinstance(item, Image)
                 else {"type": "text", "text": item} for item in content]
        out.append({"role": role, "content": parts})
    return out


def generate_messages(conversation):
    """The same conversation in qvl generate's --messages format (engine/text/messages_json.h): images by path."""
    out = []
    for role, content in conversation:
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        parts = [{"type": "image", "image": item.path} if isinstance(item, Image)
                 else {"type": "text", "text": item} for item in content]
        out.append({"role": role, "content": parts})
    return out


def qvl_generate(conversation, max_new_tokens):
    """`qvl generate --json` on the conversation, greedy, on the CPU: its JSON report."""
    with tempfile.TemporaryDirectory(prefix="qvl-serve-test-") as folder:
        messages_file = os.path.join(folder, "messages.json")
        with open(messages_file, "w") as f:
            json.dump(generate_messages(conversation), f)
        command = [required_env("QVL_BINARY"), "generate", "--model", required_env("QVL_TEST_MODEL"),
                   "--messages", messages_file, "--device", "cpu", "--temperature", "0",
                   "--max-new-tokens", str(max_new_tokens), "--json"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed with code {run.returncode}:\n{run.stderr}")
    return json.loads(run.stdout)


# --- streaming ----------------------------------------------------------------------------------------------------


class Streamed:
    """What a streamed answer came to."""

    def __init__(self, chunks):
        self.chunks = chunks
        with_choices = [c for c in chunks if c.choices]
        self.text = "".join(c.choices[0].delta.content or "" for c in with_choices)
        finishing = [c.choices[0].finish_reason for c in with_choices if c.choices[0].finish_reason]
        self.finish_reasons = finishing
        self.finish_reason = finishing[-1] if finishing else None
        usage = [c.usage for c in chunks if c.usage is not None]
        self.usage = usage[-1] if usage else None
        self.usage_chunks = [c for c in chunks if c.usage is not None]


def stream_chat(client, **kwargs):
    return Streamed(list(client.chat.completions.create(stream=True, **kwargs)))


def read_sse_events(response):
    """The `data:` payloads of a server-sent event stream, read from an http.client response to its end."""
    events, buffer = [], b""
    while True:
        piece = response.read1(65536)
        if not piece:
            break
        buffer += piece
    for block in buffer.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            events.append(b"\n".join(data).decode())
    return events


class ApiTestCase(unittest.TestCase):
    maxDiff = None
    server = None
    client = None

    def assert_api_error(self, status, body, expected_status, expected_type, names=()):
        """An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}}, whose message or param holds each
        string of `names` (the field at fault, or the limit)."""
        self.assertEqual(status, expected_status, f"status of an error answer; body: {body}")
        self.assertIsInstance(body, dict, "the error body must be a JSON object")
        self.assertIn("error", body, f"error answers are {{'error': {{...}}}}: {body}")
        error = body["error"]
        for key in ("message", "type", "param", "code"):
            self.assertIn(key, error, f"the error object lacks '{key}': {error}")
        self.assertIsInstance(error["message"], str)
        self.assertTrue(error["message"], "the error message is empty")
        self.assertEqual(error["type"], expected_type, f"error type; error: {error}")
        said = f"{error['message']} {error.get('param') or ''}"
        for name in names:
            if isinstance(name, re.Pattern):
                self.assertRegex(said, name, f"the error should name {name.pattern}: {error}")
            else:
                self.assertIn(name, said, f"the error should name {name!r}: {error}")
        return error

    def assert_client_error(self, error_class, expected_status, expected_type, names=(), **kwargs):
        """The OpenAI client's create() raises `error_class` for the request; its body is checked as above."""
        with self.assertRaises(error_class) as raised:
            self.client.chat.completions.create(**kwargs)
        error = raised.exception
        try:
            body = error.response.json()  # the body as the server sent it (the client's error.body is its "error")
        except ValueError:
            body = error.response.text
        return self.assert_api_error(error.status_code, body, expected_status, expected_type, names)

    def post_chat(self, body, headers=None):
        """A raw POST /v1/chat/completions (bytes are sent as they are): (status, headers, parsed JSON)."""
        return self.server.request_json("POST", "/v1/chat/completions", body, headers)


# --- the default server -------------------------------------------------------------------------------------------


class DefaultServerTest(ApiTestCase):
    """qvl serve with its defaults on the demo model."""

    @classmethod
    def setUpClass(cls):
        cls.server = QvlServer().start()
        cls.addClassCleanup(cls.server.stop)  # SIGTERM; fails the run unless the exit code is 0
        cls.client = OpenAI(base_url=cls.server.base_url, api_key="no-key-needed", max_retries=0, timeout=300)
        cls.addClassCleanup(cls.client.close)  # before the server stops (cleanups run last first)
        cls._greedy_scene = None

    def greedy_scene_answer(self):
        """The server's greedy answer to the sample picture's question (asked once, used by several tests)."""
        if DefaultServerTest._greedy_scene is None:
            response = self.client.chat.completions.create(
                model="qvl", messages=openai_messages([("user", [Image(SCENE), QUESTION])]), temperature=0,
                max_tokens=64)
            DefaultServerTest._greedy_scene = response
        return DefaultServerTest._greedy_scene

    # The model and the server's state.

    def test_health_names_the_model_device_and_queue(self):
        status, body = self.server.health()
        self.assertEqual(status, 200, body)
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["model"], self.server.model_id)
        self.assertEqual(body["device"], "cpu")
        queue = body["queue"]
        self.assertIn(queue["running"], (0, 1))
        self.assertIsInstance(queue["waiting"], int)
        self.assertGreaterEqual(queue["waiting"], 0)
        self.assertIsInstance(queue["capacity"], int)
        self.assertGreaterEqual(queue["capacity"], 0)

    def test_ready_line_is_printed(self):
        self.assertTrue(any(line.startswith("qvl serve: ready") for line in self.server.stdout_lines),
                        f"stdout: {self.server.stdout_lines}")

    def test_models_lists_the_model_folder_name(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [self.server.model_id])
        self.assertEqual(self.server.model_id, "demo-shapes")
        model = models.data[0]
        self.assertEqual(model.object, "model")
        self.assertEqual(model.owned_by, "qvl")
        self.assertIsInstance(model.created, int)
        status, _, body = self.server.request_json("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(body["object"], "list")

    # Answers: the same as qvl generate, token for token.

    def check_equals_generate(self, conversation, max_tokens):
        reference = qvl_generate(conversation, max_tokens)
        messages = openai_messages(conversation)
        prompt_tokens = len(reference["prompt_token_ids"])
        completion_tokens = len(reference["generated_token_ids"])
        finish_reason = FINISH_REASON[reference["stop_reason"]]

        # Any model name is accepted; the answer names the server's model.
        response = self.client.chat.completions.create(model="gpt-4o-mini", messages=messages, temperature=0,
                                                       max_tokens=max_tokens)
        self.assertEqual(response.object, "chat.completion")
        self.assertEqual(response.model, self.server.model_id)
        self.assertEqual(len(response.choices), 1)
        choice = response.choices[0]
        self.assertEqual(choice.index, 0)
        self.assertEqual(choice.message.role, "assistant")
        self.assertEqual(choice.message.content, reference["text"])
        self.assertEqual(choice.finish_reason, finish_reason)
        self.assertEqual(response.usage.prompt_tokens, prompt_tokens)
        self.assertEqual(response.usage.completion_tokens, completion_tokens)
        self.assertEqual(response.usage.total_tokens, prompt_tokens + completion_tokens)

        streamed = stream_chat(self.client, model="qvl", messages=messages, temperature=0,
                               max_completion_tokens=max_tokens, stream_options={"include_usage": True})
        self.assertEqual(streamed.text, reference["text"])
        self.assertEqual(streamed.finish_reasons, [finish_reason])
        self.assertIsNotNone(streamed.usage, "include_usage: a last chunk carries the usage")
        self.assertEqual(streamed.usage.prompt_tokens, prompt_tokens)
        self.assertEqual(streamed.usage.completion_tokens, completion_tokens)
        self.assertEqual(streamed.usage.total_tokens, prompt_tokens + completion_tokens)
        return response

    def test_text_answer_equals_qvl_generate(self):
        self.check_equals_generate([("system", "You are a helpful assistant."), ("user", QUESTION)], max_tokens=24)

    def test_picture_answer_equals_qvl_generate_and_transformers(self):
        response = self.check_equals_generate([("user", [Image(SCENE), QUESTION])], max_tokens=64)
        self.assertEqual(response.choices[0].message.content, transformers_answer("scene-1.png", QUESTION))
        self.assertEqual(response.choices[0].finish_reason, "stop")

    def test_developer_role_is_a_system_prompt(self):
        with_system = [("system", "Answer briefly."), ("user", QUESTION)]
        with_developer = [("developer", "Answer briefly."), ("user", QUESTION)]
        answers = [self.client.chat.completions.create(model="qvl", messages=openai_messages(c), temperature=0,
                                                       max_tokens=12) for c in (with_system, with_developer)]
        self.assertEqual(answers[0].choices[0].message.content, answers[1].choices[0].message.content)
        self.assertEqual(answers[0].usage.prompt_tokens, answers[1].usage.prompt_tokens)

    # Sampling.

    def test_same_seed_same_answer_other_seeds_differ(self):
        def sample(seed):
            response = self.client.chat.completions.create(
                model="qvl", messages=[{"role": "user", "content": "Tell me a story about a picture."}],
                temperature=1.0, top_p=0.9, seed=seed, max_tokens=20)
            return response.choices[0].message.content

        first = {seed: sample(seed) for seed in (1, 2, 3, 4, 5, 6)}
        for seed in (1, 4):
            self.assertEqual(sample(seed), first[seed], f"seed {seed} gave another answer the second time")
        self.assertGreater(len(set(first.values())), 1,
                           f"six seeds at temperature 1.0 all gave the same answer: {first[1]!r}")

    # Stop strings and lengths.

    def test_stop_string_ends_the_answer_before_it(self):
        full = self.greedy_scene_answer().choices[0].message.content
        words = full.split(" ")
        self.assertGreaterEqual(len(words), 4, f"the greedy answer is too short to cut: {full!r}")
        stop = " " + words[len(words) // 2]
        expected = full[:full.index(stop)]
        messages = openai_messages([("user", [Image(SCENE), QUESTION])])

        response = self.client.chat.completions.create(model="qvl", messages=messages, temperature=0, max_tokens=64,
                                                       stop=["#never-said#", stop])
        self.assertEqual(response.choices[0].message.content, expected)
        self.assertEqual(response.choices[0].finish_reason, "stop")

        streamed = stream_chat(self.client, model="qvl", messages=messages, temperature=0, max_tokens=64, stop=stop)
        self.assertEqual(streamed.text, expected)
        self.assertEqual(streamed.finish_reasons, ["stop"])

    def test_max_tokens_ends_with_length(self):
        full = self.greedy_scene_answer().choices[0].message.content
        messages = openai_messages([("user", [Image(SCENE), QUESTION])])
        contents = []
        for limit in ({"max_tokens": 3}, {"max_completion_tokens": 3}):
            response = self.client.chat.completions.create(model="qvl", messages=messages, temperature=0, **limit)
            self.assertEqual(response.choices[0].finish_reason, "length", limit)
            self.assertEqual(response.usage.completion_tokens, 3, limit)
            contents.append(response.choices[0].message.content)
            self.assertTrue(contents[-1] and full.startswith(contents[-1]), f"{contents[-1]!r} does not begin {full!r}")
        streamed = stream_chat(self.client, model="qvl", messages=messages, temperature=0, max_tokens=3,
                               stream_options={"include_usage": True})
        self.assertEqual(streamed.finish_reasons, ["length"])
        self.assertEqual(streamed.usage.completion_tokens, 3)
        self.assertEqual([streamed.text, contents[1]], [contents[0]] * 2)

    # Streaming.

    def test_stream_chunks_and_usage(self):
        messages = openai_messages([("user", [Image(SCENE), QUESTION])])
        plain = self.client.chat.completions.create(model="qvl", messages=messages, temperature=0, max_tokens=64)

        streamed = stream_chat(self.client, model="qvl", messages=messages, temperature=0, max_tokens=64,
                               stream_options={"include_usage": True})
        chunks = streamed.chunks
        self.assertGreater(len(chunks), 3)
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertEqual(len({c.id for c in chunks}), 1, "every chunk of one answer has the same id")
        self.assertTrue(all(c.model == self.server.model_id for c in chunks))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant", "the first delta names the role")
        # The finish reason comes once, in the last chunk with choices; then the usage, in a chunk without choices.
        with_choices = [c for c in chunks if c.choices]
        self.assertEqual([c.choices[0].finish_reason for c in with_choices][:-1], [None] * (len(with_choices) - 1))
        self.assertEqual(with_choices[-1].choices[0].finish_reason, "stop")
        self.assertEqual(len(streamed.usage_chunks), 1)
        self.assertIs(chunks[-1], streamed.usage_chunks[0], "the usage chunk is the last")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(streamed.text, plain.choices[0].message.content)
        self.assertEqual(streamed.usage.prompt_tokens, plain.usage.prompt_tokens)
        self.assertEqual(streamed.usage.completion_tokens, plain.usage.completion_tokens)
        self.assertEqual(streamed.usage.total_tokens, plain.usage.total_tokens)

        without_usage = stream_chat(self.client, model="qvl", messages=messages, temperature=0, max_tokens=64)
        self.assertEqual(without_usage.usage_chunks, [], "no usage chunk unless include_usage asks for it")
        self.assertEqual(without_usage.text, plain.choices[0].message.content)

    def test_stream_wire_format_ends_with_done(self):
        body = {"model": "qvl", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
                "max_tokens": 8, "stream": True}
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            self.assertEqual(response.status, 200)
            self.assertTrue(response.getheader("Content-Type", "").startswith("text/event-stream"),
                            response.getheader("Content-Type"))
            events = read_sse_events(response)
        finally:
            conn.close()
        self.assertGreaterEqual(len(events), 3, events)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events.count("[DONE]"), 1)
        for event in events[:-1]:
            self.assertEqual(json.loads(event)["object"], "chat.completion.chunk")

    # The conversation cache.

    def test_follow_up_reuses_the_earlier_prompt(self):
        # A system prompt no other test sends: the first request cannot find anything cached.
        opening = [("system", f"Conversation {uuid.uuid4()}."), ("user", [Image(SCENE), QUESTION])]
        first = self.client.chat.completions.create(model="qvl", messages=openai_messages(opening), temperature=0,
                                                    max_tokens=64)
        details = first.usage.prompt_tokens_details
        self.assertIsNotNone(details, "usage.prompt_tokens_details is missing")
        self.assertEqual(details.cached_tokens, 0)

        follow_up = opening + [("assistant", first.choices[0].message.content),
                               ("user", "What colour is the triangle?")]
        second = self.client.chat.completions.create(model="qvl", messages=openai_messages(follow_up),
                                                     temperature=0, max_tokens=32)
        cached = second.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, 0, "the follow-up should reuse the first request's keys and values")
        self.assertLess(cached, second.usage.prompt_tokens, "the new user turn cannot have been cached")
        # Reused keys and values give the answer a fresh run gives.
        reference = qvl_generate(follow_up, 32)
        self.assertEqual(second.choices[0].message.content, reference["text"])
        self.assertEqual(second.usage.prompt_tokens, len(reference["prompt_token_ids"]))
        self.assertEqual(second.usage.completion_tokens, len(reference["generated_token_ids"]))

    # Errors.

    def test_malformed_json_is_400(self):
        status, _, body = self.post_chat(b'{"model": "qvl", "messages": [{"role": "user", "content": "hi"}')
        self.assert_api_error(status, body, 400, "invalid_request_error")
        status, _, body = self.post_chat(b"[1, 2, 3]")  # JSON, but not an object
        self.assert_api_error(status, body, 400, "invalid_request_error")

    def test_unknown_role_is_named(self):
        self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error", names=["messages[0].role"],
                                 model="qvl", messages=[{"role": "wizard", "content": "hi"}])
        status, _, body = self.post_chat({"model": "qvl", "messages": [{"role": "user", "content": "hi"},
                                                                       {"role": 7, "content": "x"}]})
        self.assert_api_error(status, body, 400, "invalid_request_error", names=["messages[1].role"])
        status, _, body = self.post_chat({"model": "qvl", "messages": [{"content": "hi"}]})
        self.assert_api_error(status, body, 400, "invalid_request_error", names=["messages[0].role"])

    def test_wrong_types_are_named(self):
        cases = [({"max_tokens": "ten"}, "max_tokens"), ({"temperature": "hot"}, "temperature"),
                 ({"stream": "yes"}, "stream"), ({"stop": 5}, "stop"), ({"seed": 1.5}, "seed")]
        for extra, field in cases:
            with self.subTest(field=field):
                body = {"model": "qvl", "messages": [{"role": "user", "content": "hi"}], **extra}
                status, _, answer = self.post_chat(body)
                self.assert_api_error(status, answer, 400, "invalid_request_error", names=[field])
        status, _, answer = self.post_chat({"model": "qvl", "messages": "hi"})
        self.assert_api_error(status, answer, 400, "invalid_request_error", names=["messages"])
        status, _, answer = self.post_chat({"model": "qvl", "messages": [{"role": "user", "content": 42}]})
        self.assert_api_error(status, answer, 400, "invalid_request_error", names=["messages[0].content"])

    def test_more_than_one_answer_is_refused(self):
        error = self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                         model="qvl", messages=[{"role": "user", "content": "hi"}], n=2)
        self.assertTrue(error["param"] == "n" or re.search(r"\bn\b", error["message"]), error)

    def test_more_than_four_stop_strings_are_refused(self):
        self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error", names=["stop"],
                                 model="qvl", messages=[{"role": "user", "content": "hi"}],
                                 stop=["a", "b", "c", "d", "e"])

    def test_http_image_url_is_refused_without_fetching(self):
        fetched = []

        class Recorder(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the name http.server calls)
                fetched.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        picture_host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        thread = threading.Thread(target=picture_host.serve_forever, daemon=True)
        thread.start()
        try:
            for scheme in ("http", "https"):
                url = f"{scheme}://127.0.0.1:{picture_host.server_address[1]}/scene-1.png"
                with self.subTest(scheme=scheme):
                    self.assert_client_error(
                        openai.BadRequestError, 400, "invalid_request_error", names=["messages[0].content[1]"],
                        model="qvl", messages=[{"role": "user", "content": [
                            {"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": url}}]}])
        finally:
            picture_host.shutdown()
            picture_host.server_close()
        self.assertEqual(fetched, [], "qvl serve must not fetch image URLs")

    def test_local_files_are_refused_without_allow_local_files(self):
        for url in (SCENE, "file://" + os.path.abspath(SCENE)):
            with self.subTest(url=url):
                self.assert_client_error(
                    openai.BadRequestError, 400, "invalid_request_error",
                    names=["messages[0].content[0]", "allow-local-files"],
                    model="qvl", messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]}])

    def test_unknown_path_is_404(self):
        status, _, body = self.server.request_json("GET", "/v1/no-such-thing")
        self.assertEqual(status, 404, body)
        self.assertIn("error", body)
        self.assertIsInstance(body["error"]["message"], str)
        status, _, body = self.server.request_json("POST", "/v1/completions", {"model": "qvl", "prompt": "hi"})
        self.assertEqual(status, 404, body)

    def test_an_endpoint_asked_with_the_other_method_is_405(self):
        status, headers, body = self.server.request_json("GET", "/v1/chat/completions")
        self.assertEqual(status, 405, body)
        self.assertEqual(headers.get("allow"), "POST")
        self.assertIn("takes POST, not GET", body["error"]["message"])
        status, headers, body = self.server.request_json("POST", "/v1/models", {})
        self.assertEqual(status, 405, body)
        self.assertEqual(headers.get("allow"), "GET")
        # Without a body too (it was 411, asked for a Content-Length), for /health and for a model by its id (it was
        # 404, as if the path did not exist).
        for path in ("/v1/models", "/health", "/v1/models/demo-shapes", "/v1/models/no-such-model"):
            status, headers, body = self.server.request_json("POST", path)
            self.assertEqual(status, 405, body)
            self.assertEqual(headers.get("allow"), "GET")

    def test_a_content_length_that_is_not_a_number_is_400_at_once(self):
        for length in ("-5", "12abc"):
            with self.subTest(length=length):
                started = time.monotonic()
                status, _, body = self.server.request_json(
                    "POST", "/v1/chat/completions", headers={"Content-Type": "application/json", "Content-Length": length},
                    timeout=10.0)
                self.assertEqual(status, 400, body)
                self.assertIn("Content-Length must be a number of bytes", body["error"]["message"])
                self.assertLess(time.monotonic() - started, 2.0, "answered without waiting for a body")

    def test_refused_requests_leave_the_engine_free(self):
        self.server.wait_until_idle()  # from an idle queue: what is running after the refusals is theirs
        for body in (b"{", {"model": "qvl", "messages": [{"role": "wizard", "content": "hi"}]}):
            status, _, answer = self.post_chat(body)
            self.assertEqual(status, 400, answer)
        status, body = self.server.health()
        self.assertEqual((status, body["queue"]["running"], body["queue"]["waiting"]), (200, 0, 0), body)
        response = self.client.chat.completions.create(model="qvl", messages=[{"role": "user", "content": QUESTION}],
                                                       temperature=0, max_tokens=2)
        self.assertEqual(response.usage.completion_tokens, 2)


# --- a server with tight limits -----------------------------------------------------------------------------------

API_KEY = "qvl-test-key-" + uuid.uuid4().hex[:8]


class LimitedServerTest(ApiTestCase):
    """qvl serve with an API key, local files from one folder, and small limits."""

    # Below the defaults of --default-max-tokens (1024) and of the memory plan's context (--plan-context, 2048): both
    # follow a smaller context.
    MAX_CONTEXT = 600
    MAX_IMAGE_PIXELS = 1000

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory(prefix="qvl-serve-files-")
        cls.addClassCleanup(cls.folder.cleanup)
        cls.allowed = os.path.join(cls.folder.name, "allowed")
        cls.outside = os.path.join(cls.folder.name, "outside")
        for folder in (cls.allowed, cls.outside):
            os.makedirs(folder)
            with open(os.path.join(folder, "small.png"), "wb") as f:
                f.write(png_bytes(16, 16))  # 256 pixels: under the limit
        cls.server = QvlServer("--api-key", API_KEY, "--allow-local-files", cls.allowed, "--max-images", "1",
                               "--max-image-pixels", str(cls.MAX_IMAGE_PIXELS), "--max-context", str(cls.MAX_CONTEXT),
                               "--max-body-mb", "1", "--queue", "1").start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = OpenAI(base_url=cls.server.base_url, api_key=API_KEY, max_retries=0, timeout=300)
        cls.addClassCleanup(cls.client.close)

    def auth(self, key=API_KEY):
        return {"Authorization": f"Bearer {key}"}

    def picture_request(self, *urls, text=QUESTION):
        parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
        return dict(model="qvl", max_tokens=2, temperature=0,
                    messages=[{"role": "user", "content": parts + [{"type": "text", "text": text}]}])

    # The API key.

    def test_api_key_is_required(self):
        body = {"model": "qvl", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        status, _, answer = self.post_chat(body)  # no Authorization header
        self.assert_api_error(status, answer, 401, "authentication_error")
        status, _, answer = self.post_chat(body, self.auth("wrong-" + API_KEY))
        self.assert_api_error(status, answer, 401, "authentication_error")
        status, _, answer = self.post_chat(body, {"Authorization": API_KEY})  # not a Bearer token
        self.assert_api_error(status, answer, 401, "authentication_error")
        status, _, answer = self.server.request_json("GET", "/v1/models")
        self.assert_api_error(status, answer, 401, "authentication_error")

        with OpenAI(base_url=self.server.base_url, api_key="wrong", max_retries=0, timeout=60) as wrong_client:
            with self.assertRaises(openai.AuthenticationError) as raised:
                wrong_client.chat.completions.create(model="qvl", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(raised.exception.status_code, 401)
        self.assertEqual(raised.exception.type, "authentication_error")

        status, _, answer = self.post_chat(body, self.auth())
        self.assertEqual(status, 200, answer)
        self.assertEqual(self.client.models.list().data[0].id, self.server.model_id)

    def test_health_needs_no_key(self):
        status, body = self.server.health()
        self.assertEqual(status, 200, body)
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["queue"]["capacity"], 1)

    # Limits.

    def test_too_many_images_names_the_limit(self):
        small = data_url(png_bytes(16, 16))
        error = self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                         **self.picture_request(small, small))
        self.assertRegex(error["message"], r"(?<![0-9])1(?![0-9])", f"the limit (1) is not named: {error}")
        self.assertRegex(error["message"].lower(), r"image|picture", error)
        # One picture is within the limit.
        response = self.client.chat.completions.create(**self.picture_request(small))
        self.assertEqual(response.usage.completion_tokens, 2)

    def test_image_over_the_pixel_limit_is_refused_before_decoding(self):
        for name, png in (("a real 64x64 picture", png_bytes(64, 64)),
                          ("a header claiming 4000x4000 with no pixels", png_header_only(4000, 4000))):
            with self.subTest(image=name):
                error = self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                                 names=[str(self.MAX_IMAGE_PIXELS)],
                                                 **self.picture_request(data_url(png)))
                self.assertIn("messages[0].content[0]", f"{error['message']} {error['param']}", error)

    def test_prompt_over_max_context_names_the_limit(self):
        long_text = "Count the shapes: " + " circle" * 1000  # about 1,000 tokens, over the limit
        self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                 names=[str(self.MAX_CONTEXT)], model="qvl", max_tokens=4,
                                 messages=[{"role": "user", "content": long_text}])

    def test_a_request_without_max_tokens_gets_what_the_context_leaves(self):
        # 1024 new tokens (--default-max-tokens) after a ~400-token prompt would pass the 600-token context: with no
        # max_tokens named, the answer is shortened to fit instead; named, the same length is refused.
        messages = [{"role": "user", "content": "Count the shapes: " + " circle" * 400}]
        response = self.client.chat.completions.create(model="qvl", temperature=0, messages=messages)
        self.assertLessEqual(response.usage.total_tokens, self.MAX_CONTEXT, response.usage)
        self.assertGreater(response.usage.prompt_tokens, 400, response.usage)
        self.assertGreaterEqual(response.usage.completion_tokens, 1, response.usage)
        self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error", names=[str(self.MAX_CONTEXT)],
                                 model="qvl", temperature=0, max_tokens=1024, messages=messages)

    def test_body_over_max_body_mb_is_413(self):
        body = json.dumps({"model": "qvl", "max_tokens": 2, "user": "x" * (3 << 19),  # 1.5 MiB
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, _, answer = self.post_chat(body, self.auth())
        self.assertEqual(status, 413, answer)
        self.assertIn("error", answer)
        self.assertIsInstance(answer["error"]["message"], str)
        # Just under the limit is read (the padding is in a field the server ignores).
        body = json.dumps({"model": "qvl", "max_tokens": 2, "user": "x" * (900 << 10),
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, _, answer = self.post_chat(body, self.auth())
        self.assertEqual(status, 200, answer)

    # Local files.

    def test_local_files_inside_the_allowed_folder_are_read(self):
        inside = os.path.join(self.allowed, "small.png")
        for url in (inside, "file://" + inside):
            with self.subTest(url=url):
                response = self.client.chat.completions.create(**self.picture_request(url))
                self.assertEqual(response.usage.completion_tokens, 2)
                self.assertGreater(response.usage.prompt_tokens, 10, "the picture's tokens are in the prompt")

    def test_local_files_outside_the_allowed_folder_are_refused(self):
        for url in (os.path.join(self.outside, "small.png"),
                    os.path.join(self.allowed, "..", "outside", "small.png"),
                    "file://" + os.path.join(self.outside, "small.png"),
                    "file://otherhost" + os.path.join(self.allowed, "small.png"),
                    "/etc/passwd"):
            with self.subTest(url=url):
                self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                         names=["messages[0].content[0]"], **self.picture_request(url))

        # A link inside the folder that leads out of it is followed, then refused.
        link = os.path.join(self.allowed, "link.png")
        if not os.path.lexists(link):
            os.symlink(os.path.join(self.outside, "small.png"), link)
        self.assert_client_error(openai.BadRequestError, 400, "invalid_request_error",
                                 names=["messages[0].content[0]"], **self.picture_request(link))

    def test_a_percent_escaped_file_url_inside_the_folder_is_read(self):
        url = "file://localhost" + os.path.join(self.allowed, "small.png").replace("small", "%73mall")
        response = self.client.chat.completions.create(**self.picture_request(url))
        self.assertEqual(response.usage.completion_tokens, 2)

    # Bodies whose size is not known before reading them.

    def test_chunked_and_compressed_bodies_are_refused_before_reading(self):
        body = json.dumps({"model": "qvl", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        try:  # chunked: the size limit could not be checked before reading (a body of any size would be read)
            conn.putrequest("POST", "/v1/chat/completions")
            for name, value in {**self.auth(), "Content-Type": "application/json", "Transfer-Encoding": "chunked"}.items():
                conn.putheader(name, value)
            conn.endheaders()
            conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            response = conn.getresponse()
            answer = json.loads(response.read())
            self.assertEqual(response.status, 411, answer)
            self.assertEqual(answer["error"]["code"], "length_required", answer)
        finally:
            conn.close()
        # gzip: a small body could inflate to gigabytes.
        status, _, answer = self.post_chat(gzip.compress(body), {**self.auth(), "Content-Encoding": "gzip"})
        self.assertEqual(status, 415, answer)
        self.assertEqual(answer["error"]["code"], "unsupported_encoding", answer)

    def test_bearer_is_matched_in_any_case_and_a_model_can_be_looked_up(self):
        status, _, answer = self.server.request_json("GET", "/v1/models/" + self.server.model_id,
                                                     headers={"Authorization": f"bearer {API_KEY}"})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["id"], self.server.model_id)
        status, _, answer = self.server.request_json("GET", "/v1/models/gpt-4o", headers=self.auth())
        self.assertEqual(status, 404, answer)
        self.assertEqual(answer["error"]["code"], "model_not_found", answer)


if __name__ == "__main__":
    unittest.main(verbosity=2)
