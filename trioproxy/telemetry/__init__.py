"""What a request leaves behind: trace (events, tracer, watchers), access_log, metrics, otel, history
(the request history).
"""
