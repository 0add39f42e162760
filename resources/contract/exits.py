"""Exit statuses the commands share beyond 0 and bad input (2), from sysexits.h where one
fits: defined here once, so `servingbench load`, `analyze`, `import` and `export` (and the
scripts that read their status) agree on what each number means."""

# EX_IOERR: the disk filled up; what was written before stays readable, the input is fine
DISK_FULL = 74
# EX_TEMPFAIL: the analysis needed more memory than DuckDB was allowed; the input is fine,
# raise SERVINGBENCH_ANALYZE_MEMORY and run it again
NO_MEMORY = 75
