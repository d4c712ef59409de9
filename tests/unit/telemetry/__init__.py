"""Unit tests of trioproxy's telemetry package."""
