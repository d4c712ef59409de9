"""Backend side: pool.py (the h11 connection pool), tls.py (backend TLS connections)."""
