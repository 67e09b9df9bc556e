"""The gateway's MCP server (/mcp) through the official MCP Python SDK over Streamable HTTP:
list the tools, call each one, and get errors for bad arguments and a missing key.

Run by tests/it/mcp.rs, which scripts the upstream's answer to `ask`
("Set BRISA_PORT.", in two tokens) over a gateway with examples/knowledge ingested.

Usage: python mcp_client.py BASE_URL KEY
"""

import asyncio
import sys

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

BASE, KEY = sys.argv[1], sys.argv[2]
URL = f"{BASE}/mcp"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def expect_error(session, name, args, words):
    try:
        r = await session.call_tool(name, args)
    except MCPError as e:
        check(any(w in e.message for w in words), f"{name} {args}: {e.message}")
        return e.message
    raise AssertionError(f"{name} {args} should fail, got {r}")


async def main():
    # No key: refused before any MCP message is read.
    r = httpx.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Accept": "application/json, text/event-stream"})
    check(r.status_code == 401 and r.json()["error"]["message"], f"no key: {r.status_code} {r.text}")
    print("ok   no key: 401")

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
    async with client, streamable_http_client(URL, http_client=client) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            check(set(tools) == {"search_knowledge", "get_source", "ask"}, tools.keys())
            for t in tools.values():
                check(len(t.description) > 80 and t.input_schema["required"], t)
            check(tools["search_knowledge"].input_schema["properties"]["doc_type"]["enum"]
                  == ["spec", "narrative", "code", "code_example"], tools["search_knowledge"])
            print("ok   tools:", sorted(tools))

            r = await session.call_tool("search_knowledge", {
                "query": "Which environment variable overrides the server port?", "top_k": 3})
            check(not r.is_error, r)
            hits = r.structured_content["hits"]
            check(1 <= len(hits) <= 3, hits)
            check(hits[0]["file"] == "docs/en/deployment.md", [h["file"] for h in hits])
            for h in hits:
                check(h["text"] and h["lines"][0] <= h["lines"][1] and h["score"] > 0, h)
                check(h["url"] == f"{BASE}/v1/sources/{h['id']}", h["url"])
            print("ok   search_knowledge:", [h["file"] for h in hits])

            r = await session.call_tool("search_knowledge", {
                "query": "puerto del servidor", "language": "es", "top_k": 5})
            es = r.structured_content["hits"]
            check(es and all(h["language"] == "es" for h in es), es)
            r = await session.call_tool("search_knowledge", {
                "query": "route table register endpoint", "doc_type": "code"})
            code = r.structured_content["hits"]
            check(code and all(h["doc_type"] == "code" for h in code), code)
            print("ok   filters: language es", len(es), "doc_type code", len(code))

            r = await session.call_tool("get_source", {"id": hits[0]["id"]})
            check(not r.is_error, r)
            one = r.structured_content
            check(one["file"] == hits[0]["file"] and one["text"] == hits[0]["text"], one)
            r = await session.call_tool("get_source", {"id": "0123456789abcdef"})
            check(r.is_error and "no source" in r.content[0].text, r)
            print("ok   get_source: found, and a tool error for an unknown id")

            pieces = []

            async def progress(done, total, message):
                pieces.append(message)

            r = await session.call_tool("ask", {
                "question": "Which environment variable overrides the server port?"},
                progress_callback=progress)
            check(not r.is_error, r)
            answer = r.structured_content
            check(answer["answer"] == "Set BRISA_PORT.", answer)
            check(answer["sources"] and answer["sources"][0]["url"].startswith(f"{BASE}/v1/sources/"), answer)
            check("".join(p or "" for p in pieces) == "Set BRISA_PORT.", pieces)
            print("ok   ask:", answer["answer"], "| progress pieces:", len(pieces), "| sources:", len(answer["sources"]))

            for name, args, words in [
                ("search_knowledge", {}, ["query"]),
                ("search_knowledge", {"query": "x", "top_k": 0}, ["top_k"]),
                ("search_knowledge", {"query": "x", "doc_type": "poem"}, ["poem"]),
                ("search_knowledge", {"query": "x", "extra": 1}, ["extra"]),
                ("get_source", {"id": 7}, ["string"]),
                ("ask", {"question": "  "}, ["question"]),
                ("no_such_tool", {}, ["no_such_tool"]),
            ]:
                message = await expect_error(session, name, args, words)
                print(f"ok   {name} {args}: {message}")
    print("all mcp checks passed")


asyncio.run(main())
