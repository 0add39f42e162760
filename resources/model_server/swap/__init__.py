"""Several models on one node: the swap driver (driver.py), one endpoint that routes by the
request's `model` and swaps sleeping models awake, and that driver as a process of its own
(process.py)."""
