"""Unit tests of trioproxy's rls package."""
