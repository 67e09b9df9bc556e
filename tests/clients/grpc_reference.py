"""The Brunix API reference's own gRPC client examples (its section 5), as its users run
them, against the gateway's `brunix.AssistanceEngine`.

Stubs are generated from proto/brunix.proto with `python -m grpc_tools.protoc` into a
temporary directory at run time, as the reference's "Regenerate gRPC stubs" step does;
nothing generated is kept. Run by tests/it/grpc_python.rs, which starts the gateway in
front of the scripted upstream (whose every answer is "Hello from upstream", streamed as
"Hello", " from", " upstream") and a scripted judge with a golden dataset that has a
"deployment" question, and afterwards checks what the upstream model was sent.

With KEY (the gateway has server.api_keys), every example sends it as
`authorization: Bearer KEY` metadata through a channel interceptor, so the examples' own
code stays as written, and a call without it must get UNAUTHENTICATED.

Usage: python grpc_reference.py HOST:PORT [KEY]
"""

import base64
import json
import pathlib
import subprocess
import sys
import tempfile

import grpc

ADDR = sys.argv[1]
KEY = sys.argv[2] if len(sys.argv) > 2 else None
PROTO = pathlib.Path(__file__).resolve().parents[2] / "proto" / "brunix.proto"
ANSWER = "Hello from upstream"
SERVICE = "brunix.AssistanceEngine"
passed, failures = [], []


def check(name, fn):
    try:
        fn()
        passed.append(name)
        print(f"ok  {name}")
    except grpc.RpcError as e:
        fail(name, f"RpcError {e.code()}: {e.details()}")
    except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
        fail(name, f"{type(e).__name__}: {e}")


def fail(name, why):
    """One line per check: messages' reprs span lines."""
    failures.append(name)
    print(f"FAIL {name}: " + " ".join(str(why).split()))


def generate_stubs(out):
    """The reference's stub generation, into `out`; then brunix_pb2(_grpc) import."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}",
         f"--python_out={out}", f"--grpc_python_out={out}", str(PROTO)],
        check=True, capture_output=True, text=True)
    made = sorted(p.name for p in pathlib.Path(out).iterdir())
    assert made == ["brunix_pb2.py", "brunix_pb2_grpc.py"], made
    sys.path.insert(0, out)


class _Details(grpc.ClientCallDetails):
    def __init__(self, details, metadata):
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = details.compression


class BearerKey(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer KEY` to every call (a gateway with keys wants it)."""

    def __init__(self, key):
        self._header = ("authorization", f"Bearer {key}")

    def _keyed(self, details):
        return _Details(details, list(details.metadata or []) + [self._header])

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._keyed(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._keyed(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._keyed(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._keyed(details), requests)


def open_channel():
    """The reference's `grpc.insecure_channel(...)`, with the key when there is one."""
    channel = grpc.insecure_channel(ADDR)
    return grpc.intercept_channel(channel, BearerKey(KEY)) if KEY else channel


def expect_status(code, call):
    """`call()` (which reads the whole response) must fail with `code`."""
    try:
        got = call()
    except grpc.RpcError as e:
        assert e.code() == code, f"{e.code()}: {e.details()}"
        return e
    raise AssertionError(f"expected {code}, got {got!r}")


def main():
    with tempfile.TemporaryDirectory(prefix="brunix-stubs-") as out:
        try:
            generate_stubs(out)
        except subprocess.CalledProcessError as e:
            fail("generate_stubs", f"grpc_tools.protoc exited {e.returncode}: {e.stderr}")
        except Exception as e:  # noqa: BLE001
            fail("generate_stubs", f"{type(e).__name__}: {e}")
        else:
            passed.append("generate_stubs")
            print("ok  generate_stubs")
            run_examples()
    print(f"{len(passed)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


def run_examples():
    import brunix_pb2
    import brunix_pb2_grpc
    from google.protobuf import descriptor_pool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    channel = open_channel()
    stub = brunix_pb2_grpc.AssistanceEngineStub(channel)

    def encode(text: str) -> str:
        return base64.b64encode(text.encode("utf-8")).decode("utf-8")

    # grpcurl -plaintext localhost:50052 list / describe brunix.AssistanceEngine
    def reflection_list_and_describe():
        db = ProtoReflectionDescriptorDatabase(channel)
        services = list(db.get_services())
        assert SERVICE in services, services
        service = descriptor_pool.DescriptorPool(db).FindServiceByName(SERVICE)
        methods = {m.name: m for m in service.methods}
        assert sorted(methods) == ["AskAgent", "AskAgentStream", "EvaluateRAG"], list(methods)
        assert methods["AskAgent"].input_type.full_name == "brunix.AgentRequest"
        assert methods["AskAgentStream"].output_type.full_name == "brunix.AgentResponse"
        assert methods["EvaluateRAG"].output_type.full_name == "brunix.EvalResponse"
        for name, streams in [("AskAgent", True), ("AskAgentStream", True), ("EvaluateRAG", False)]:
            m = methods[name]
            assert (m.client_streaming, m.server_streaming) == (False, streams), name
        # The reflected messages are the proto's: field numbers as in the reference.
        fields = {f.name: f.number for f in methods["AskAgent"].input_type.fields}
        assert fields == {"query": 1, "session_id": 2, "editor_content": 3, "selected_text": 4,
                          "extra_context": 5, "user_info": 6}, fields

    # AskAgent — with editor context (the reference's Python example, as written).
    def ask_agent_with_editor_context():
        editor_code = """
try()
    ormDirect("UPDATE users SET active=1", res)
exception(e)
    addVar(_status, 500)
    addResult("Error")
end()
"""
        request = brunix_pb2.AgentRequest(
            query="why is this not catching the error?",
            session_id="dev-001",
            editor_content=encode(editor_code),
            selected_text=encode(editor_code),  # same block selected
            extra_context=encode("file: handler.avap"),
            user_info=json.dumps({"dev_id": 1, "project_id": 2, "org_id": 3}),
        )
        responses, finals = [], []
        for response in stub.AskAgent(request):
            responses.append(response)
            if response.is_final:
                finals.append(response.text)
        assert len(responses) == 1, responses
        assert finals == [ANSWER], finals

    # AskAgent — basic query: {"query": "Que significa AVAP?", "session_id": "dev-001"}
    def ask_agent_basic():
        request = brunix_pb2.AgentRequest(query="Que significa AVAP?", session_id="dev-001")
        responses = list(stub.AskAgent(request))
        assert len(responses) == 1, responses
        (response,) = responses
        assert response.is_final, response
        assert response.avap_code == "AVAP-2026", response
        assert response.text == ANSWER, response
        assert not response.text.startswith("[ENG] Error:"), response

    def ask_stream(query, session_id):
        """The reference's client contract: accumulate `text` of the non-final messages;
        the final message ends the stream with empty text."""
        request = brunix_pb2.AgentRequest(query=query, session_id=session_id)
        messages = list(stub.AskAgentStream(request))
        assert messages, "no message"
        *tokens, final = messages
        assert final.is_final and final.text == "" and final.avap_code == "", final
        assert all(not m.is_final and m.avap_code == "" for m in tokens), tokens
        text = "".join(m.text for m in tokens if not m.is_final)
        return tokens, text

    # AskAgentStream — token streaming.
    def ask_agent_stream():
        tokens, text = ask_stream("Write an AVAP API that returns hello world", "dev-001")
        assert [m.text for m in tokens] == ["Hello", " from", " upstream"], tokens
        assert text == ANSWER, text

    # Multi-turn conversation: two turns on one session (the gateway's test checks that
    # the second turn carried the first).
    def multi_turn():
        for query in ("What is registerEndpoint?", "Can you show me an example?"):
            _, text = ask_stream(query, "user-abc")
            assert text == ANSWER, (query, text)

    # EvaluateRAG — {"category": ..., "limit": 10}: the reference asks for "core_syntax";
    # the test's golden dataset has "deployment".
    def evaluate_rag():
        r = stub.EvaluateRAG(brunix_pb2.EvalRequest(category="deployment", limit=10))
        assert r.status == "ok", r.status
        assert r.questions_evaluated == 1, r
        assert r.elapsed_seconds >= 0 and r.judge_model and r.index, r
        scores = [r.faithfulness, r.answer_relevancy, r.context_recall, r.context_precision]
        assert all(0.0 <= s <= 1.0 for s in scores + [r.global_score]), r
        nonzero = [s for s in scores if s > 0]
        mean = sum(nonzero) / len(nonzero) if nonzero else 0.0
        assert abs(r.global_score - mean) < 1e-4, (r.global_score, scores)
        want = ("EXCELLENT" if r.global_score >= 0.80 else
                "ACCEPTABLE" if r.global_score >= 0.60 else "INSUFFICIENT")
        assert r.verdict == want, (r.verdict, r.global_score)
        assert len(r.details) == 1, r.details
        d = r.details[0]
        assert d.category == "deployment" and d.id and d.question, d
        assert d.answer_preview == ANSWER[:300], d
        assert d.n_chunks >= 0, d

    # Section 4: what the evaluation cannot do comes back in `status`, not as a status
    # code (the reference's own category is not in the test's dataset).
    def evaluate_rag_error_in_status():
        r = stub.EvaluateRAG(brunix_pb2.EvalRequest(category="core_syntax", limit=10))
        assert r.status and r.status != "ok", r
        assert r.questions_evaluated == 0 and not r.details, r

    def empty_query_is_invalid_argument():
        for method in (stub.AskAgent, stub.AskAgentStream):
            for query in ("", "   "):
                request = brunix_pb2.AgentRequest(query=query, session_id="dev-001")
                e = expect_status(grpc.StatusCode.INVALID_ARGUMENT,
                                  lambda: list(method(request)))
                assert "query" in e.details(), e.details()

    def missing_key_is_unauthenticated():
        bare = grpc.insecure_channel(ADDR)
        keyless = brunix_pb2_grpc.AssistanceEngineStub(bare)
        request = brunix_pb2.AgentRequest(query="Que significa AVAP?", session_id="dev-001")
        for metadata in (None, [("authorization", "Bearer not-the-key")]):
            for call in (lambda: list(keyless.AskAgent(request, metadata=metadata)),
                         lambda: list(keyless.AskAgentStream(request, metadata=metadata)),
                         lambda: keyless.EvaluateRAG(brunix_pb2.EvalRequest(), metadata=metadata)):
                expect_status(grpc.StatusCode.UNAUTHENTICATED, call)
        bare.close()

    checks = [reflection_list_and_describe, ask_agent_with_editor_context, ask_agent_basic,
              ask_agent_stream, multi_turn, evaluate_rag, evaluate_rag_error_in_status,
              empty_query_is_invalid_argument]
    if KEY:
        checks.append(missing_key_is_unauthenticated)
    for fn in checks:
        check(fn.__name__, fn)
    channel.close()


if __name__ == "__main__":
    main()
