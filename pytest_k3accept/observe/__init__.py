"""Observation of the deployment: endpoint and client, /metrics, server lifecycle, host, load."""
