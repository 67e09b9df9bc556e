"""The coding agents' APIs through their real SDKs: the anthropic package against
/v1/messages and the openai package's Responses API against /v1/responses.

Run by tests/it/agent_clients.rs, which starts the gateway (keys: sk-a) in front of the
scripted upstream. Phase `plain`: every answer is the upstream's default ("Hello from
upstream"). Phase `tools`: the upstream is scripted to ask for get_weather, then answer,
once for each SDK. Every streamed event is re-validated against its typed model (the
SDKs build events without validation by default), and each check asserts what the SDK
hands to its user.

Phase `sources`: the gateway answers `brunix` from examples/knowledge, so its answers
cite their sources: Anthropic's `search_result_location` citations, the Responses API's
`url_citation` annotations.

Usage: python agent_sdks.py BASE_URL MODEL plain|tools|sources
"""

import sys

import anthropic
import openai
import pydantic

BASE, MODEL, PHASE = sys.argv[1], sys.argv[2], sys.argv[3]
KEY = "sk-a"
ANSWER = "Hello from upstream"
failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def validated(event):
    """The event, parsed again strictly by its own typed model (raises on a missing or
    mistyped field)."""
    model = type(event)
    assert issubclass(model, pydantic.BaseModel), model
    model.model_validate(event.model_dump(mode="json", exclude_unset=True), strict=False)
    return event


an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
oa = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)
question = [{"role": "user", "content": "What is a closure?"}]
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
WEATHER_FN = {"type": "function", "name": "get_weather", "description": "Weather of a city",
              "parameters": WEATHER["input_schema"], "strict": False}


# --- anthropic ---------------------------------------------------------------------

def anthropic_whole():
    m = an.messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=question)
    assert isinstance(m, anthropic.types.Message), type(m)
    assert [b.type for b in m.content] == ["text"], m
    assert m.content[0].text == ANSWER, m
    assert m.stop_reason == "end_turn" and m.model == MODEL, m
    assert m.usage.input_tokens > 0 and m.usage.output_tokens == 3, m.usage


def anthropic_raw_stream_events_validate():
    events = [validated(e) for e in an.messages.create(
        model=MODEL, max_tokens=64, messages=question, stream=True)]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == ANSWER, text


def anthropic_stream_helper():
    with an.messages.stream(model=MODEL, max_tokens=64, messages=question) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == ANSWER, text
    assert final.content[0].text == ANSWER and final.stop_reason == "end_turn", final
    assert final.usage.output_tokens == 3, final.usage


def anthropic_beta_path():
    # Claude Code's path: /v1/messages?beta=true, with betas in a header.
    m = an.beta.messages.create(model=MODEL, max_tokens=64, messages=question,
                                betas=["fine-grained-tool-streaming-2025-05-14"])
    assert m.content[0].text == ANSWER, m


def anthropic_count_tokens():
    short = an.messages.count_tokens(model=MODEL, messages=question).input_tokens
    long = an.messages.count_tokens(
        model=MODEL, system="Be brief.", tools=[WEATHER],
        messages=[{"role": "user", "content": "What is a closure? " * 50}]).input_tokens
    assert 0 < short < long, (short, long)
    beta = an.beta.messages.count_tokens(model=MODEL, messages=question).input_tokens
    assert beta == short, (beta, short)


def anthropic_errors():
    try:
        an.messages.create(model="no-such-model", max_tokens=8, messages=question)
        raise AssertionError("no error")
    except anthropic.NotFoundError as e:
        assert e.status_code == 404 and e.body["error"]["type"] == "not_found_error", e.body
    try:
        an.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "file_011"}}]}])
        raise AssertionError("no error")
    except anthropic.BadRequestError as e:
        assert e.body["error"]["type"] == "invalid_request_error", e.body
    bad = anthropic.Anthropic(base_url=BASE, api_key="sk-wrong", max_retries=0)
    try:
        bad.messages.create(model=MODEL, max_tokens=8, messages=question)
        raise AssertionError("no error")
    except anthropic.AuthenticationError as e:
        assert e.body["error"]["type"] == "authentication_error", e.body
    # The key as a bearer token (ANTHROPIC_AUTH_TOKEN) works as well as x-api-key.
    bearer = anthropic.Anthropic(base_url=BASE, auth_token=KEY, api_key=None, max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=8, messages=question).content


def anthropic_models():
    ids = [m.id for m in an.models.list()]
    assert "brunix" in ids, ids


def anthropic_tool_round_trip():
    # Streamed, as Claude Code asks: the SDK rebuilds the input from input_json_delta.
    with an.messages.stream(model=MODEL, max_tokens=200, tools=[WEATHER],
                            messages=[{"role": "user", "content": "Weather in Paris?"}]) as s:
        for e in s:
            validated(e)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use", final
    call = [b for b in final.content if b.type == "tool_use"]
    assert len(call) == 1 and call[0].name == "get_weather", final
    assert call[0].input == {"city": "Paris"}, call[0].input
    m = an.messages.create(
        model=MODEL, max_tokens=200, tools=[WEATHER],
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": final.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call[0].id,
                                                "content": "18C, sunny"}]}])
    assert m.content[0].text == ANSWER and m.stop_reason == "end_turn", m


# --- openai responses ----------------------------------------------------------------

def responses_create():
    r = oa.responses.create(model=MODEL, instructions="Be brief.", input="What is a closure?")
    assert r.status == "completed" and r.output_text == ANSWER, r
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
    openai.types.responses.Response.model_validate(r.model_dump(mode="json"))


def responses_stream():
    kinds = []
    with oa.responses.stream(model=MODEL, input=question) as s:
        for e in s:
            validated(e)
            kinds.append(e.type)
        final = s.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    assert "response.output_text.delta" in kinds, kinds
    assert final.output_text == ANSWER, final


def responses_raw_stream():
    events = [validated(e) for e in oa.responses.create(model=MODEL, input="hi", stream=True)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == ANSWER, text


def responses_errors():
    try:
        oa.responses.create(model="no-such-model", input="hi")
        raise AssertionError("no error")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e.body


def responses_function_call_round_trip():
    kinds = []
    with oa.responses.stream(model=MODEL, input="Weather in Paris?", tools=[WEATHER_FN]) as s:
        for e in s:
            validated(e)
            kinds.append(e.type)
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in kinds, kinds
    calls = [o for o in final.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", final.output
    assert calls[0].arguments and '"Paris"' in calls[0].arguments, calls[0]
    r = oa.responses.create(model=MODEL, tools=[WEATHER_FN], input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
         "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C, sunny"}])
    assert r.output_text == ANSWER, r


def responses_stored_chain():
    first = oa.responses.create(model=MODEL, input="My name is Ada.", store=True)
    assert first.store is True, first
    second = oa.responses.create(model=MODEL, input="What is my name?",
                                 previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.output_text == ANSWER, second
    assert second.store is False, second
    try:
        oa.responses.create(model=MODEL, input="go on", previous_response_id=second.id)
        raise AssertionError("an unstored response was continued")
    except openai.BadRequestError as e:
        assert e.param == "previous_response_id" and "not found" in e.message, e.body


PORT_QUESTION = "How do I configure the server port?"


def anthropic_citations():
    with an.messages.stream(model=MODEL, max_tokens=64,
                            messages=[{"role": "user", "content": PORT_QUESTION}]) as s:
        events = [validated(e) for e in s]
        final = s.get_final_message()
    deltas = [e.delta for e in events
              if e.type == "content_block_delta" and e.delta.type == "citations_delta"]
    assert deltas, [e.type for e in events]
    cited = final.content[0].citations
    assert cited and all(c.type == "search_result_location" for c in cited), final
    assert [c.search_result_index for c in cited] == list(range(len(cited))), cited
    assert all(c.source.startswith(BASE + "/v1/sources/") for c in cited), cited
    whole = an.messages.create(model=MODEL, max_tokens=64,
                               messages=[{"role": "user", "content": PORT_QUESTION}])
    assert [c.source for c in whole.content[0].citations] == [c.source for c in cited], whole


def responses_annotations():
    r = oa.responses.create(model=MODEL, input=PORT_QUESTION)
    notes = r.output[0].content[0].annotations
    assert notes and all(a.type == "url_citation" for a in notes), r.output
    assert all(a.url.startswith(BASE + "/v1/sources/") for a in notes), notes


if PHASE == "sources":
    check("anthropic search_result_location citations", anthropic_citations)
    check("responses url_citation annotations", responses_annotations)
elif PHASE == "plain":
    check("anthropic whole message", anthropic_whole)
    check("anthropic raw stream events validate", anthropic_raw_stream_events_validate)
    check("anthropic stream helper", anthropic_stream_helper)
    check("anthropic beta path", anthropic_beta_path)
    check("anthropic count_tokens", anthropic_count_tokens)
    check("anthropic error classes", anthropic_errors)
    check("anthropic models", anthropic_models)
    check("responses.create", responses_create)
    check("responses.stream typed events", responses_stream)
    check("responses raw stream sequence numbers", responses_raw_stream)
    check("responses error class", responses_errors)
    check("responses stored chain (store, previous_response_id)", responses_stored_chain)
else:
    check("anthropic tool round trip (streamed)", anthropic_tool_round_trip)
    check("responses function call round trip", responses_function_call_round_trip)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
