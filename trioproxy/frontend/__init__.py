"""Client side: server (binds, the process), connections, http1 (the HTTP/1 loop), front_door, paths,
hypercorn_fixes, gc_tuning, registry (running gateways, for `trioproxy trace gateway/NAME`).
"""
