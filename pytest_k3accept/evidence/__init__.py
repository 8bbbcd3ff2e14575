"""What a session observed, as evidence: the session store."""
