"""The facades' asyncio forms give what their synchronous forms give: Prem Cortex ``aadd_note`` /
``asearch`` (async connections), calute ``abuild_context_for_task`` and the shelves' ``asave`` /
``asearch`` (worker threads)."""

from __future__ import annotations

import asyncio

import pytest

from cortex_pg import AgenticMemorySystem, CortexMemory, ValidationError
from cortex_pg.embeddings import HashingEmbedder
from tests.test_prem import ams  # noqa: F401  (the Prem Cortex system on a fresh database)


def test_prem_async_add_and_search_match_sync(ams: AgenticMemorySystem) -> None:  # noqa: F811
    async def main() -> tuple[list[str], list[dict], list[dict]]:
        ids = await asyncio.gather(
            ams.aadd_note(
                "User prefers TypeScript for new projects",
                user_id="u",
                time="2024-03-20T14:00:00Z",
                tags=["preferences"],
                mood="calm",
            ),
            ams.aadd_note("The team chose PostgreSQL for storage", user_id="u", time="2024-03-18T09:00:00Z"),
        )
        found = await ams.asearch("TypeScript projects", user_id="u", limit=2)
        windowed = await ams.asearch_memory(
            "team storage",
            user_id="u",
            date_range={"start": "2024-03-17", "end": "2024-03-19"},
            temporal_weight=None,
            now="2024-03-21",
        )
        await ams.ashutdown()
        return list(ids), found, windowed

    ids, found, windowed = asyncio.run(main())
    assert found[0]["id"] == ids[0] and found[0]["metadata"] == {"mood": "calm"}
    assert found[0]["tags"] == ["preferences"] and found[0]["keywords"]  # light keywords, as add_note
    assert [r["id"] for r in windowed] == [ids[1]] and windowed[0]["temporal_weighted"] is True
    sync = ams.search("TypeScript projects", user_id="u", limit=2)
    assert [r["id"] for r in sync] == [r["id"] for r in found]
    assert ams.read(ids[0]).links == {}


def test_prem_async_errors_are_the_sync_ones(ams: AgenticMemorySystem) -> None:  # noqa: F811
    async def main() -> list[str]:
        fields = []
        for call in (
            lambda: ams.aadd_note("   ", user_id="u"),
            lambda: ams.asearch("q", user_id="u", date_range="not a date at all"),
            lambda: ams.aadd_note("x", user_id="u", links={"5a4b0f0e-0000-4000-8000-000000000000": {}}),
        ):
            with pytest.raises(ValidationError) as err:
                await call()
            fields.append(err.value.field)
        await ams.ashutdown()
        return fields

    assert asyncio.run(main()) == ["content", "date_range", "links['5a4b0f0e-0000-4000-8000-000000000000']"]


def test_calute_async_context_and_shelves(db_url: str) -> None:
    memory = CortexMemory(database_url=db_url, embedder=HashingEmbedder())
    try:

        async def main() -> tuple[str, list]:
            await memory.asave_task_result(
                "Analyze sales data",
                "Sales increased 15% this quarter",
                agent_role="Data Analyst",
                importance=0.8,
            )
            await memory.short_term.asave("Quarterly review is on Friday", agent_id="Data Analyst")
            context, found = await asyncio.gather(
                memory.abuild_context_for_task("Analyze sales data", agent_role="Data Analyst"),
                memory.long_term.asearch("sales increased", limit=3),
            )
            return context, found

        context, found = asyncio.run(main())
        assert "Sales increased 15% this quarter" in context and "Quarterly review is on Friday" in context
        assert context == memory.build_context_for_task("Analyze sales data", agent_role="Data Analyst")
        assert found and found[0].content == "Sales increased 15% this quarter"
    finally:
        memory.close()


def test_concurrent_inline_adds_of_one_session_all_get_processed(ams: AgenticMemorySystem) -> None:  # noqa: F811
    """Inline processing (enable_background_processing=False) of notes added concurrently to one
    session: evolution jobs that lose a deadlock to each other are run again at once, so every
    job is done when its add_note returns (no job left queued for a worker that never comes)."""
    from sqlalchemy import text

    async def main() -> tuple[list[str], list[tuple[str, str | None]]]:
        adds = [
            ams.aadd_note(
                f"The user likes green tea with honey, variant {i % 8}.", user_id="inline", session_id="s"
            )
            for i in range(40)
        ]
        ids = await asyncio.gather(*adds)
        with ams.store.engine.connect() as conn:
            jobs = conn.execute(
                text(
                    "SELECT status, error FROM cortex.evolution_jobs WHERE user_id = 'inline' AND kind = 'prem'"
                )
            ).all()
        await ams.ashutdown()
        return list(ids), [(j.status, j.error) for j in jobs]

    ids, jobs = asyncio.run(main())
    # one job per note stored (a text merged away by evolution is stored again when re-added)
    assert 8 <= len(set(ids)) == len(jobs)
    assert [j for j in jobs if j[0] != "done"] == []
