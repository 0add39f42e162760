"""One named DuckDB query per `.sql` file, `$` bind parameters only.

A package only so that the queries ship in the wheel as package data and are read through
importlib.resources (`servingbench.resources.analysis.sqlfiles`), the same way from a source
tree and from an installed wheel."""
