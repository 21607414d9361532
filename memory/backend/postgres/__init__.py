"""Django database backend: PostgreSQL through psycopg 3, refusing to start without pgvector."""
