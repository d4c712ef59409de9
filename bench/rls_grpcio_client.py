"""A measured alternative to the gateway's RLS client, kept for bench/global_ratelimit.py:
grpcio's future API bridged into Trio.

grpcio's asyncio API does not run under Trio, so a call starts with ``future()`` (grpcio's C core
does the HTTP/2 work on its own thread) and its done-callback wakes the Trio task through the
loop's ``TrioToken``; no worker thread is held per call. The gateway uses
``trioproxy.rls.wire_client`` instead, which measured cheaper (bench/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc  # type: ignore[import-untyped]
import trio

from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.wire_client import METHOD, RlsCallFailed, encode_request


class RlsClient:
    def __init__(self, target: str) -> None:
        self.target = target
        self.channel = grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)])
        self._call = self.channel.unary_unary(
            METHOD, request_serializer=None,  # requests arrive serialized (encode_request)
            response_deserializer=rls_pb2.RateLimitResponse.FromString)

    async def should_rate_limit(self, domain: str,
                                descriptors: Sequence[tuple[Sequence[tuple[str, str]], int | None]],
                                timeout: float) -> Any:
        """``descriptors``: ``(entries, hits)``; hits None: one hit; 0: only look; n: add n (tokens)."""
        request = encode_request(domain, descriptors)  # the same bytes the gateway sends
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        future = self._call.future(request, timeout=timeout)
        future.add_done_callback(lambda _f: token.run_sync_soon(done.set))
        try:
            await done.wait()
        except BaseException:
            future.cancel()
            raise
        try:
            return future.result(timeout=0)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "error"
            raise RlsCallFailed(f"{name}: {exc.details() if hasattr(exc, 'details') else exc}") from None
        except grpc.FutureCancelledError:
            raise RlsCallFailed("cancelled") from None

    def close(self) -> None:
        self.channel.close()
