"""Checks of the repository as a whole: README, docs, CI script, packaging, the import graph."""
