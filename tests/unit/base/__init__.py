"""Unit tests of trioproxy's base package."""
