"""Unit tests of trioproxy's config package."""
