"""Endpoint robustness: the malformed-request probes and the check that sends them."""
