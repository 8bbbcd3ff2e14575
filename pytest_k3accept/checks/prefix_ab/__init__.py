"""Prefix-cache A/B (C8): the pure comparison and the run that feeds it."""
