"""In-process tests, one folder per package of trioproxy/ (base: its top-level modules)."""
