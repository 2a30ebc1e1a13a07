"""``python -m cortex_pg`` runs the ``cortex-pg`` command."""

from cortex_pg.cli import app

app()
