"""The verdict: findings read from evidence, the verdict rules, advice and layers (C12)."""
