"""The admin server (Quart-Trio) and the small stats and readiness servers."""
