"""Unit tests of trioproxy's workers package."""
