"""Unit tests of trioproxy's frontend package."""
