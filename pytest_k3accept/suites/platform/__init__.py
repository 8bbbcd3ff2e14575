"""The platform acceptance suite (see docs/suites.md)."""
