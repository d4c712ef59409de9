"""``--workers N``: one supervisor process, N worker processes serving the same binds (docs/workers.md).

``supervisor`` binds, spawns and watches; ``worker`` is the entry point of one worker process;
``control`` is the framed channel between them; ``shared_limits`` keeps local rate-limit buckets
in shared memory; ``trace_relay`` lets the supervisor's ``/debug/trace`` claim requests of every
worker; ``metrics_merge`` sums the workers' ``/metrics``.
"""
