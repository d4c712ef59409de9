"""Unit tests of trioproxy's tui package."""
