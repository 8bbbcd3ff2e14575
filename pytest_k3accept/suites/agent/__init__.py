"""The agent acceptance suite (see docs/suites.md)."""
