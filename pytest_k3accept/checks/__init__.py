"""The checklist C1-C12: one module per checklist group, each deciding its items from evidence."""
