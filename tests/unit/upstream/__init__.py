"""Unit tests of trioproxy's upstream package."""
