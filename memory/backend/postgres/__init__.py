"""Django database backend: PostgreSQL through psycopg 3, refusing to start without pgvector (base);
`url.database_settings` turns a postgres:// URL into its DATABASES entry."""
