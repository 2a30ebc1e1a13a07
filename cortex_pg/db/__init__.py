"""Database layer: ORM models, engine creation, the embedded server and Alembic helpers."""
