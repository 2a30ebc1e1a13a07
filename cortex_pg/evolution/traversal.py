"""Re-export of :mod:`cortex_pg.store.traversal` (the store owns it; evolution uses it through the
store's modules, so the store never imports evolution)."""

from cortex_pg.store.traversal import *  # noqa: F403
