"""meta-report: a sweep's settings side by side (seeds pooled), from what its runs wrote."""
