"""The MCP server end to end with the SDK's own client: over stdio (``cortex-pg mcp`` as a
subprocess) and over streamable HTTP (``cortex-pg mcp --http PORT``, a subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'cortex-pg[mcp]')")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

TOOLS = {
    "add_note",
    "search",
    "read",
    "update",
    "delete",
    "get_entity_info",
    "get_related_entities",
    "linked_notes",
    "build_context_for_task",
}


def _env(db_url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": db_url, "CORTEX_PG_EMBEDDER": "hashing", "HF_HUB_OFFLINE": "1"}


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    assert result.is_error
    text = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    return text


async def _session(client: Client) -> None:
    """The conversation both transports run."""
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) >= TOOLS
    limit = tools["search"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"]) == (1, 50)
    assert tools["add_note"].input_schema["required"] == ["content"]

    added = _data(
        await client.call_tool(
            "add_note",
            {
                "content": "Alice works at Acme on the Berlin office",
                "user_id": "u1",
                "tags": ["work"],
                "time": "2024-03-20T14:00:00Z",
                "metadata": {"source": "mcp"},
            },
        )
    )
    other = _data(
        await client.call_tool("add_note", {"content": "Acme opened a Berlin office", "user_id": "u1"})
    )
    found = _data(
        await client.call_tool(
            "search",
            {
                "query": "where does Alice work",
                "user_id": "u1",
                "limit": 5,
                "where_filter": {"tags": {"$contains": "work"}},
                "date_range": "2024-03",
                "temporal_weight": 0,
            },
        )
    )
    assert [r["id"] for r in found["results"]] == [added["id"]]
    assert _data(await client.call_tool("search", {"query": "Alice", "user_id": "nobody"}))["results"] == []

    read = _data(await client.call_tool("read", {"memory_id": added["id"], "user_id": "u1"}))
    assert read["content"].startswith("Alice works") and read["metadata"] == {"source": "mcp"}
    updated = _data(
        await client.call_tool("update", {"memory_id": added["id"], "user_id": "u1", "tags": ["job"]})
    )
    assert updated["tags"] == ["job"]

    info = _data(await client.call_tool("get_entity_info", {"name": "alice", "user_id": "u1"}))
    assert info["entity"]["name"] == "Alice" and added["id"] in info["entity"]["mentions"]
    related = _data(await client.call_tool("get_related_entities", {"name": "Alice", "user_id": "u1"}))
    assert related["entity"] == "Alice" and isinstance(related["related"], list)
    assert (
        _data(await client.call_tool("linked_notes", {"memory_id": added["id"], "user_id": "u1"}))["notes"]
        == []
    )
    ctx = _data(
        await client.call_tool("build_context_for_task", {"task_description": "Plan the Berlin trip"})
    )
    assert ctx == {"context": ""}

    # typed errors become tool errors naming the field, never a stack trace
    assert "limit" in _error(await client.call_tool("search", {"query": "x", "limit": 99}))
    # an argument the schema does not name is refused (a misspelt filter is not dropped)
    assert tools["search"].input_schema["additionalProperties"] is False
    assert "where_fliter" in _error(
        await client.call_tool("search", {"query": "x", "where_fliter": {"tags": {"$contains": "work"}}})
    )
    assert "ValidationError: date_range: " in _error(
        await client.call_tool("search", {"query": "x", "date_range": "not a date at all"})
    )
    assert "ValidationError: date_range: sets neither start nor end" in _error(
        await client.call_tool("search", {"query": "x", "date_range": {}})
    )
    assert "ValidationError: where_filter" in _error(
        await client.call_tool("search", {"query": "x", "where_filter": {"tags": {"$regex": "a"}}})
    )
    assert "ValidationError: content" in _error(await client.call_tool("add_note", {"content": "   "}))
    assert "ValidationError: context: longer than 10,000" in _error(
        await client.call_tool("add_note", {"content": "x", "context": "c" * 10_001})
    )
    assert "ValidationError: tags: more than 1,000" in _error(
        await client.call_tool("add_note", {"content": "x", "tags": [f"t{i}" for i in range(1_001)]})
    )
    assert "NotFoundError" in _error(
        await client.call_tool("read", {"memory_id": other["id"], "user_id": "u2"})
    )
    assert "ValidationError: memory_id" in _error(await client.call_tool("delete", {"memory_id": "nope"}))
    for tool in ("read", "update", "linked_notes"):  # the tool's own argument is named
        assert "ValidationError: memory_id" in _error(await client.call_tool(tool, {"memory_id": "nope"}))
    assert "NotFoundError: entity" in _error(await client.call_tool("get_entity_info", {"name": "Zorro"}))
    for tool in ("get_entity_info", "get_related_entities"):  # the argument is `name`, not `entity`
        for bad in ("a\x00b", "   "):
            assert "ValidationError: name: " in _error(
                await client.call_tool(tool, {"name": bad, "user_id": "u1"})
            )
    assert "ValidationError: agent_role: contains NUL" in _error(  # (not the search's `filters`)
        await client.call_tool("build_context_for_task", {"task_description": "Berlin", "agent_role": "\x00"})
    )

    assert _data(await client.call_tool("delete", {"memory_id": other["id"], "user_id": "u1"})) == {
        "deleted": True
    }


def test_mcp_over_stdio(db_url: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "cortex_pg", "mcp"], env=_env(db_url))

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            await _session(client)

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mcp_over_streamable_http(db_url: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cortex_pg", "mcp", "--http", str(port)],
        env=_env(db_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "the MCP HTTP server did not start"
                time.sleep(0.2)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as client:
                await _session(client)

        asyncio.run(main())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("where", ["busy port", "unknown host"])
def test_mcp_http_refuses_a_port_in_use_or_an_unknown_host(db_url: str, where: str) -> None:
    from typer.testing import CliRunner

    from cortex_pg.cli import app

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = (
            ["--http", str(port)] if where == "busy port" else ["--http", "1", "--host", "nosuchhost.invalid"]
        )
        result = CliRunner().invoke(app, ["mcp", *args], env=_env(db_url))
    flag = "--http" if where == "busy port" else "--host"
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flag}: ") and result.stderr.count("\n") == 1, result.stderr
