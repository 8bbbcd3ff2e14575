"""The production acceptance suite (see docs/suites.md)."""
