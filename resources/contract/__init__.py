"""The data contract (docs/contract.md): the run manifest, the Arrow schemas of the records,
and the timestamp format. It imports nothing of servingbench; everything else builds on it."""
