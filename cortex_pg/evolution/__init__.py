"""Memory evolution: related-note discovery, decisions, links, merges, and the durable job queue.

Modules: ``queue`` (``cortex.evolution_jobs``), ``worker`` (threads / standalone), ``decide``
(Prem Cortex JSON shape, offline heuristic), ``evolve`` (one job's effects), ``links``
(reciprocal links), ``merge`` (note merges), ``traversal`` (``cortex.linked_notes``).
"""

from cortex_pg.evolution.decide import heuristic_decider, llm_decider
from cortex_pg.evolution.links import get_links, set_links
from cortex_pg.evolution.merge import merge_notes
from cortex_pg.evolution.traversal import LinkedNote, linked_notes
from cortex_pg.evolution.worker import Worker

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
