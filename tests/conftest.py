"""Shared helpers live in tests/support (imported as `tests.support.…`); fixtures stay in
the conftest beside the tests that use them."""
