"""The poc acceptance suite (see docs/suites.md)."""
