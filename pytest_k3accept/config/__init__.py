"""Options, ini values, environment variables and the table files (profiles, presets)."""
