"""Memory evolution: related-note discovery, decisions, links, merges, and the durable job queue.

Modules: ``worker`` (threads / standalone), ``decide`` (Prem Cortex JSON shape, offline
heuristic), ``evolve`` (one job's effects), ``merge`` (note merges). The tables they work on
belong to the store, which never imports this package: the durable job queue
(``cortex_pg.store.jobs``, ``cortex.evolution_jobs``), note links (``cortex_pg.store.links``)
and link traversal (``cortex_pg.store.traversal``, ``cortex.linked_notes``); ``queue``,
``links`` and ``traversal`` here re-export them.
"""

from cortex_pg.evolution.decide import heuristic_decider, llm_decider
from cortex_pg.evolution.merge import merge_notes
from cortex_pg.evolution.worker import Worker
from cortex_pg.store.links import get_links, set_links
from cortex_pg.store.traversal import LinkedNote, linked_notes

__all__ = [
    "LinkedNote",
    "Worker",
    "get_links",
    "heuristic_decider",
    "linked_notes",
    "llm_decider",
    "merge_notes",
    "set_links",
]
