"""AWS access: one counted caller with retries for every request the eks profile makes."""
