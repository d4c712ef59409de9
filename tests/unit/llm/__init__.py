"""Unit tests of trioproxy's llm package."""
