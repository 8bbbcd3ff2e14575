"""What the plugin writes: record, reproduction fields, redaction, HTML report, charts."""
