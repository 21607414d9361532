"""Django database backend: SQLite through sqlean.py with sqlite-vec loaded on every connection."""
