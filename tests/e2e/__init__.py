"""End-to-end tests: real gateways, backends and subprocesses on 127.0.0.1 port 0."""
