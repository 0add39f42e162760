"""Where outputs live: run folders and the DuckDB store (store.py), their copy on S3
(runstore.py), and the board where load pods meet (board.py)."""
