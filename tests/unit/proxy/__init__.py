"""Unit tests of trioproxy's proxy package."""
