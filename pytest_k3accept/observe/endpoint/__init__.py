"""The endpoint: discovery, the measuring client, its transport and request faults."""
