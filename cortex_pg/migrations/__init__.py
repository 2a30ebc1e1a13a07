"""Alembic migrations of the cortex schema (shipped inside the package)."""
