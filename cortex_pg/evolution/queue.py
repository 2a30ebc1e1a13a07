"""Re-export of :mod:`cortex_pg.store.jobs` (the store owns it; evolution uses it through the
store's modules, so the store never imports evolution)."""

from cortex_pg.store.jobs import *  # noqa: F403
