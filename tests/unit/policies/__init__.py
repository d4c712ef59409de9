"""Unit tests of trioproxy's policies package."""
