"""The MCP relay of one ``mcp`` backend: one endpoint in front of several MCP servers (targets).

What a client's POST becomes (agentgateway's behaviour, ``crates/agentgateway/src/mcp``):

- ``initialize`` goes to every target; the client gets one merged result and a session id that
  carries each target's session (``session.py``: signed, so another replica continues it).
- ``tools/list``, ``prompts/list``, ``resources/list``, ``resources/templates/list`` go to every
  target of the session; the answers are merged, names prefixed ``<target>_`` (resource URIs
  ``<target>+<uri>``) when the backend prefixes, and filtered by ``mcpAuthorization``.
- ``tools/call``, ``prompts/get``, ``resources/read``, ``completion/complete``... go to the one
  target the name (or URI) names, unprefixed; its answer is relayed as it comes (JSON, or an SSE
  stream whose notifications and server requests pass through; a server request's id is
  rewritten so the client's answer finds its target).
- notifications go to every target; a client's response goes to the target that asked.

Errors are JSON-RPC errors that name what failed: malformed input -32700/-32600 (HTTP 400), an
unknown or denied tool -32602 ``Unknown tool: <name>``, a failed target -32603 ``MCP target
'<name>' failed: <reason>`` (``failOpen`` leaves a failed target out of listings instead).
Every call is reported to ``observe`` as an ``McpCall`` (trace event, access log, metrics).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import trio

from ..asgi import Header
from ..config.model import McpBackend, McpTarget
from ..policies.authorization import AuthorizationPolicy, decide
from . import jsonrpc as rpc
from .connections import ConnectionPool, ConnectionReply
from .session import SessionCodec, TargetSessions
from .upstream import HttpTargets, TargetFailure, TargetReply

__all__ = ["DEFAULT_VERSION", "McpAnswer", "McpCall", "McpRelay", "McpRequest"]

#: the protocol version asked of a target when the client named none (stateless mode)
DEFAULT_VERSION = "2025-06-18"
DELIMITER = "_"
JSON = (b"content-type", b"application/json")
SSE = (b"content-type", b"text/event-stream")

#: list method -> (result member, item field holding the name, CEL/log resource kind)
LISTS = {
    "tools/list": ("tools", "name", "tool"),
    "prompts/list": ("prompts", "name", "prompt"),
    "resources/list": ("resources", "uri", "resource"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate", "resource"),
}
#: routed method -> (params field naming the item, resource kind)
ROUTED = {
    "tools/call": ("name", "tool"),
    "prompts/get": ("name", "prompt"),
    "resources/read": ("uri", "resource"),
    "resources/subscribe": ("uri", "resource"),
    "resources/unsubscribe": ("uri", "resource"),
}
FANOUT_EMPTY = frozenset({"logging/setLevel"})  # every target, an empty result


@attrs.define
class McpCall:
    """One JSON-RPC message handled: for the trace, the access log and the metrics."""

    method: str
    start: float
    name: str | None = None
    target: str | None = None
    result: str = "ok"            # ok | error | denied
    error: str | None = None
    end: float = 0.0


@attrs.define
class McpRequest:
    method: str                   # HTTP method
    headers: list[Header]
    body: bytes
    activation: Mapping[str, Any]  # the request's CEL variables (jwt...); ``mcp`` is added per decision


@attrs.define
class McpAnswer:
    status: int
    headers: list[Header]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None


def _json_answer(message: dict[str, Any], status: int = 200, headers: list[Header] | None = None) -> McpAnswer:
    return McpAnswer(status, [JSON, *(headers or [])], json.dumps(message).encode())


def _sse(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def _header(headers: list[Header], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class McpRelay:
    """The relay of one ``mcp`` backend; stateless itself (the session is in the id)."""

    def __init__(self, spec: McpBackend, codec: SessionCodec, http: HttpTargets,
                 connections: ConnectionPool | None = None) -> None:
        self.spec = spec
        self.codec = codec
        self.http = http
        self.connections = connections or ConnectionPool()
        self.targets = {t.name: t for t in spec.targets}
        self.index = {t.name: i for i, t in enumerate(spec.targets)}
        self.policy = AuthorizationPolicy(spec.authorization) if spec.authorization is not None else None

    # --- names -------------------------------------------------------------------------------

    def expose(self, target: str, name: str, kind: str) -> str:
        if not self.spec.prefixed:
            return name
        if kind == "resource":
            return f"{target}+{name}" if ":" in name else name
        return f"{target}{DELIMITER}{name}"

    def resolve(self, exposed: str, kind: str) -> tuple[str, str] | None:
        """(target, name at the target) of an exposed name; None when no target has it."""
        if not self.spec.prefixed:
            if len(self.targets) == 1:
                return next(iter(self.targets)), exposed
            return None  # prefixMode never: found by listing (``_owner``)
        if kind == "resource":
            target, plus, rest = exposed.partition("+")
        else:
            target, plus, rest = exposed.partition(DELIMITER)
        if not plus or target not in self.targets or not rest:
            return None
        return target, rest

    def describe(self, body: bytes) -> dict[str, Any] | None:
        """CEL's ``mcp`` for a request body before it is relayed: its method, and for a routed call
        the item (``tool``, ``prompt``, ``resource``: ``name`` at its target, ``target``; the exposed
        name when no target is known yet) and ``arguments``; None for a body that is not one message."""
        try:
            message = rpc.parse(body)
        except rpc.JsonRpcError:
            return None
        method = message.get("method")
        if not isinstance(method, str):
            return None
        out: dict[str, Any] = {"method": method}
        params = message.get("params") or {}
        routed = ROUTED.get(method)
        if routed is not None and isinstance(params.get(routed[0]), str):
            field, kind = routed
            found = self.resolve(params[field], kind)
            target, name = found if found is not None else ("", params[field])
            out[kind] = {"name": name, "target": target}
            if "arguments" in params:
                out["arguments"] = params["arguments"]
        return out

    def allowed(self, activation: Mapping[str, Any], method: str, kind: str, target: str, name: str,
                arguments: Any = None) -> bool:
        """``mcpAuthorization`` for one item (a call, or an entry of a listing)."""
        if self.policy is None:
            return True
        item = {"name": name, "target": target}
        mcp: dict[str, Any] = {"method": method, kind: item}
        if arguments is not None:
            mcp["arguments"] = arguments
        return decide(self.policy, {**activation, "mcp": mcp}).allowed

    # --- entry -------------------------------------------------------------------------------

    async def handle(self, request: McpRequest, observe: Callable[[McpCall], None],
                     nursery: trio.Nursery | None = None) -> McpAnswer:
        if request.method == "DELETE":
            return await self._delete(request)
        if request.method == "GET" and nursery is not None and self.spec.stateful:
            listened = await self._listen(request, nursery)
            if listened is not None:
                return listened
        if request.method != "POST":
            return McpAnswer(405, [(b"allow", b"POST, DELETE"), (b"content-type", b"text/plain")],
                             b"this endpoint takes POST (and DELETE to end a session)")
        call = McpCall("", trio.current_time())
        try:
            message = rpc.parse(request.body)
        except rpc.JsonRpcError as error:
            call.method, call.result, call.error, call.end = "invalid", "error", error.message, trio.current_time()
            observe(call)
            return _json_answer(error.body(), error.status)
        call.method = str(message.get("method") or "response")
        answer = await self._dispatch(request, message, call, observe)
        return answer

    async def _dispatch(self, request: McpRequest, message: dict[str, Any], call: McpCall,
                        observe: Callable[[McpCall], None]) -> McpAnswer:
        kind = rpc.kind_of(message)
        id = message.get("id")
        method = call.method

        def done(answer: McpAnswer, *, error: str | None = None, result: str | None = None) -> McpAnswer:
            if error is not None:
                call.result, call.error = result or "error", error
            call.end = trio.current_time()
            observe(call)
            return answer

        def failed(error: rpc.JsonRpcError) -> McpAnswer:
            error.id = id
            return done(_json_answer(error.body(), error.status), error=error.message,
                        result="denied" if error.denied else "error")

        if kind == "request" and method == "initialize":
            try:
                return done(await self._initialize(request, message, call))
            except rpc.JsonRpcError as error:
                return failed(error)
        session_header = _header(request.headers, b"mcp-session-id")
        sessions: TargetSessions | None = None
        temporary = False
        try:
            if kind == "request" and method == "ping":
                return done(_json_answer(rpc.result_message(id, {})))
            if kind == "request" and method not in LISTS and method not in ROUTED and method not in FANOUT_EMPTY \
                    and method != "completion/complete":
                raise rpc.JsonRpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
            if self.spec.stateful:
                if session_header is None:
                    raise rpc.JsonRpcError(rpc.INVALID_REQUEST,
                                           "Bad Request: Mcp-Session-Id header is required (initialize first)",
                                           status=400)
                sessions = self.codec.decode(session_header)
                if sessions is None:
                    raise rpc.JsonRpcError(rpc.SESSION_NOT_FOUND, "Session not found", status=404)
            else:
                if kind != "request":
                    return done(McpAnswer(202, []))
                sessions, temporary = {}, True
            if kind == "notification":
                await self._notify_all(request, message, sessions)
                return done(McpAnswer(202, []))
            if kind == "response":
                await self._relay_response(request, message, sessions, call)
                return done(McpAnswer(202, []))
            if method in LISTS:
                if temporary:
                    sessions = await self._open_all(request, call)
                return done(await self._list(request, message, sessions, call))
            if method in FANOUT_EMPTY:
                if temporary:
                    sessions = await self._open_all(request, call)
                await self._fanout(request, message, sessions, call)
                if temporary:
                    await self._close(sessions)
                return done(_json_answer(rpc.result_message(id, {})))
            answer = await self._route(request, message, sessions, call, temporary, done)
            return answer
        except rpc.JsonRpcError as error:
            if temporary and sessions:
                await self._close(sessions)
            return failed(error)

    # --- initialize ----------------------------------------------------------------------------

    async def _initialize(self, request: McpRequest, message: dict[str, Any], call: McpCall) -> McpAnswer:
        params = message.get("params") or {}
        results: dict[str, dict[str, Any]] = {}
        sessions: TargetSessions = {}
        failures: dict[str, str] = {}

        async def one(target: McpTarget) -> None:
            try:
                result, sid = await self._initialize_target(request, target, params, message.get("id"))
            except TargetFailure as failure:
                failures[target.name] = failure.reason
                return
            results[target.name] = result
            sessions[target.name] = (sid, str(result.get("protocolVersion") or params.get("protocolVersion")
                                             or DEFAULT_VERSION))

        async with trio.open_nursery() as nursery:
            for target in self.spec.targets:
                nursery.start_soon(one, target)
        self._check_failures(failures, len(self.spec.targets))
        if failures:
            call.error = "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items()))
        merged = self._merge_initialize(params, [results[t.name] for t in self.spec.targets if t.name in results])
        headers: list[Header] = []
        if self.spec.stateful:
            ordered = {t.name: sessions[t.name] for t in self.spec.targets if t.name in sessions}
            headers.append((b"mcp-session-id", self.codec.encode(ordered).encode()))
        else:
            await self._close(sessions)
        return _json_answer(rpc.result_message(message.get("id"), merged), headers=headers)

    async def _initialize_target(self, request: McpRequest, target: McpTarget, params: dict[str, Any],
                                 id: Any) -> tuple[dict[str, Any], str | None]:
        reply = await self._post(request, target, rpc_request(id if id is not None else 0, "initialize", params),
                                 None, None)
        try:
            answer = await _response_of(reply, id if id is not None else 0)
        finally:
            await reply.aclose()
        if "error" in answer:
            raise TargetFailure(f"initialize failed: {answer['error'].get('message')}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise TargetFailure("initialize answered without a result")
        return result, reply.session_id

    def _merge_initialize(self, params: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        versions = [str(r.get("protocolVersion")) for r in results if r.get("protocolVersion")]
        version = asked if versions and all(v == asked for v in versions) else min(versions, default=asked)
        capabilities: dict[str, Any] = {}
        for result in results:
            for name, value in (result.get("capabilities") or {}).items():
                if isinstance(value, dict):
                    capabilities.setdefault(name, {}).update(value)
                else:
                    capabilities.setdefault(name, value)
        from ..version import __version__
        merged: dict[str, Any] = {"protocolVersion": version or DEFAULT_VERSION, "capabilities": capabilities,
                                  "serverInfo": {"name": "trioproxy", "version": __version__}}
        if len(results) == 1 and not self.spec.prefixed:
            merged["serverInfo"] = results[0].get("serverInfo", merged["serverInfo"])
        instructions = [str(r["instructions"]) for r in results if r.get("instructions")]
        if instructions:
            merged["instructions"] = "\n\n".join(instructions)
        return merged

    async def _open_all(self, request: McpRequest, call: McpCall) -> TargetSessions:
        """Stateless mode: a fresh session with every target for this one request."""
        version = _header(request.headers, b"mcp-protocol-version") or DEFAULT_VERSION
        params = {"protocolVersion": version, "capabilities": {},
                  "clientInfo": {"name": "trioproxy", "version": "stateless"}}
        sessions: TargetSessions = {}
        failures: dict[str, str] = {}

        async def one(target: McpTarget) -> None:
            try:
                result, sid = await self._initialize_target(request, target, params, 0)
                ver = str(result.get("protocolVersion") or version)
                await self._send_and_drain(request, target, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                           sid, ver)
                sessions[target.name] = (sid, ver)
            except TargetFailure as failure:
                failures[target.name] = failure.reason

        async with trio.open_nursery() as nursery:
            for target in self.spec.targets:
                nursery.start_soon(one, target)
        try:
            self._check_failures(failures, len(self.spec.targets))
        except rpc.JsonRpcError:
            await self._close(sessions)
            raise
        return {t.name: sessions[t.name] for t in self.spec.targets if t.name in sessions}  # the targets' order

    async def _close(self, sessions: TargetSessions) -> None:
        with trio.CancelScope(shield=True):
            for name, (sid, version) in sessions.items():
                target = self.targets.get(name)
                if sid is None or target is None:
                    continue
                if target.transport in ("stdio", "sse"):
                    self.connections.stop(sid)
                else:
                    await self.http.delete(target.url, sid, version)

    def _check_failures(self, failures: dict[str, str], count: int) -> None:
        if not failures:
            return
        if self.spec.fail_open and len(failures) < count:
            return
        text = "; ".join(f"MCP target '{name}' failed: {reason}" for name, reason in sorted(failures.items()))
        raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, text)

    # --- fan-out -------------------------------------------------------------------------------

    async def _fanout(self, request: McpRequest, message: dict[str, Any], sessions: TargetSessions,
                      call: McpCall, shape: Callable[[str], dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """``message`` (``shape(target)``: that target's own) to every target of ``sessions``; their
        results by target (failures per failureMode)."""
        results: dict[str, dict[str, Any]] = {}
        failures: dict[str, str] = {}

        async def one(name: str) -> None:
            sid, version = sessions[name]
            try:
                sent = shape(name) if shape is not None else message
                reply = await self._post(request, self.targets[name], sent, sid, version)
                try:
                    answer = await _response_of(reply, message.get("id"))
                finally:
                    await reply.aclose()
            except TargetFailure as failure:
                failures[name] = failure.reason
                return
            if "error" in answer:
                failures[name] = str((answer.get("error") or {}).get("message"))
                return
            results[name] = answer.get("result") or {}

        async with trio.open_nursery() as nursery:
            for name in sessions:
                if name in self.targets:
                    nursery.start_soon(one, name)
        self._check_failures(failures, len(sessions))
        if failures:
            call.error = "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items()))
        return results

    async def _list(self, request: McpRequest, message: dict[str, Any], sessions: TargetSessions,
                    call: McpCall) -> McpAnswer:
        method = str(message["method"])
        member, field, kind = LISTS[method]
        params = {k: v for k, v in (message.get("params") or {}).items() if k != "cursor"}
        cursor = (message.get("params") or {}).get("cursor")
        pending = _cursors_in(cursor) if cursor is not None else None
        if cursor is not None and (pending is None or not set(pending) <= set(sessions)):
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"Invalid params: unknown cursor {cursor!r}")
        asked = sessions if pending is None else {name: sessions[name] for name in sessions if name in pending}

        def shape(name: str) -> dict[str, Any]:
            """Each target gets its own cursor back (the gateway's cursor holds one per target)."""
            own = {**params, "cursor": pending[name]} if pending is not None else params
            return {**{k: v for k, v in message.items() if k != "params"}, **({"params": own} if own else {})}

        results = await self._fanout(request, message, asked, call, shape)
        following = {name: str(result["nextCursor"]) for name, result in results.items()
                     if isinstance(result.get("nextCursor"), str)}
        items: list[Any] = []
        for name in asked:  # in the backend's target order
            for item in (results.get(name) or {}).get(member) or []:
                if not isinstance(item, dict) or not isinstance(item.get(field), str):
                    continue
                if not self.allowed(request.activation, method, kind, name, item[field]):
                    continue
                items.append({**item, field: self.expose(name, item[field], kind)})
        result: dict[str, Any] = {member: items}
        if following:  # the targets with more: one cursor for all of them
            result["nextCursor"] = _cursors_out(following)
        try:
            return _json_answer(rpc.result_message(message.get("id"), result))
        finally:
            if not self.spec.stateful:
                await self._close(sessions)

    async def _notify_all(self, request: McpRequest, message: dict[str, Any], sessions: TargetSessions) -> None:
        async def one(name: str) -> None:
            sid, version = sessions[name]
            try:
                await self._send_and_drain(request, self.targets[name], message, sid, version)
            except TargetFailure:
                pass  # a notification has no answer to carry the failure

        async with trio.open_nursery() as nursery:
            for name in sessions:
                if name in self.targets:
                    nursery.start_soon(one, name)

    async def _relay_response(self, request: McpRequest, message: dict[str, Any], sessions: TargetSessions,
                              call: McpCall) -> None:
        """A client's answer to a server request: to the target that asked, with its own id back."""
        found = _server_request_id(message.get("id"))
        if found is None or found[0] >= len(self.spec.targets):
            raise rpc.JsonRpcError(rpc.INVALID_REQUEST, "Invalid Request: a response to no request of this gateway",
                                   status=400)
        target = self.spec.targets[found[0]]
        call.target = target.name
        if target.name not in sessions:
            raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, f"MCP target '{target.name}' is not in this session")
        sid, version = sessions[target.name]
        try:
            await self._send_and_drain(request, target, {**message, "id": found[1]}, sid, version)
        except TargetFailure as failure:
            raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, f"MCP target '{target.name}' failed: {failure.reason}") \
                from None

    # --- routed calls ----------------------------------------------------------------------------

    async def _owner(self, request: McpRequest, kind: str, exposed: str, sessions: TargetSessions,
                     call: McpCall) -> tuple[str, str] | None:
        """prefixMode never, several targets: the target whose listing has the name."""
        list_method = {"tool": "tools/list", "prompt": "prompts/list", "resource": "resources/list"}[kind]
        member, field, _ = LISTS[list_method]
        results = await self._fanout(request, rpc_request("trioproxy-lookup", list_method, None), sessions, call)
        for name in sessions:
            for item in (results.get(name) or {}).get(member) or []:
                if isinstance(item, dict) and item.get(field) == exposed:
                    return name, exposed
        return None

    async def _route(self, request: McpRequest, message: dict[str, Any], sessions: TargetSessions, call: McpCall,
                     temporary: bool, done: Callable[..., McpAnswer]) -> McpAnswer:
        method = str(message["method"])
        params = dict(message.get("params") or {})
        if method == "completion/complete":
            ref = dict(params.get("ref") or {})
            field, kind, holder = ("uri", "resource", ref) if ref.get("type") == "ref/resource" else \
                ("name", "prompt", ref)
        else:
            field, kind = ROUTED[method]
            holder = params
        exposed = holder.get(field)
        if not isinstance(exposed, str):
            raise rpc.JsonRpcError(rpc.INVALID_PARAMS, f"Invalid params: {field} is required")
        call.name = exposed
        unknown = rpc.JsonRpcError(rpc.INVALID_PARAMS, f"Unknown {kind}: {exposed}")
        if temporary:
            sessions = await self._open_all(request, call)
        found = self.resolve(exposed, kind)
        if found is None and not self.spec.prefixed and len(self.targets) > 1:
            found = await self._owner(request, kind, exposed, sessions, call)
        if found is None:
            raise unknown
        target_name, name = found
        call.target, call.name = target_name, name
        arguments = params.get("arguments")
        if not self.allowed(request.activation, method, kind, target_name, name, arguments):
            unknown.denied = True
            raise unknown
        if target_name not in sessions:
            raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, f"MCP target '{target_name}' is unavailable: it is not "
                                                       "in this session (it failed to initialize)")
        holder[field] = name
        if holder is not params:
            params["ref"] = holder
        forwarded = {**message, "params": params}
        target = self.targets[target_name]
        sid, version = sessions[target_name]
        try:
            reply = await self._post(request, target, forwarded, sid, version)
        except TargetFailure as failure:
            raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, f"MCP target '{target_name}' failed: {failure.reason}") \
                from None
        relay = _Relayed(self, reply, message.get("id"), target_name, call, done,
                         sessions if temporary else None)
        if not reply.streamed:
            return await relay.whole()
        return McpAnswer(200, [SSE, (b"cache-control", b"no-cache")], stream=relay.stream())

    # --- upstream ------------------------------------------------------------------------------

    def _forwarded_headers(self, request: McpRequest) -> list[Header]:
        return [(name, value) for name, value in request.headers if name in (b"authorization",)]

    async def _post(self, request: McpRequest, target: McpTarget, message: dict[str, Any], sid: str | None,
                    version: str | None) -> TargetReply | ConnectionReply:
        if target.transport in ("stdio", "sse"):
            return await self.connections.post(target, message, sid)
        return await self.http.post(target.url, message, session_id=sid, version=version,
                                    headers=self._forwarded_headers(request))

    async def _send_and_drain(self, request: McpRequest, target: McpTarget, message: dict[str, Any],
                              sid: str | None, version: str | None) -> None:
        reply = await self._post(request, target, message, sid, version)
        try:
            async for _ in reply.messages():
                pass
        finally:
            await reply.aclose()

    async def _listen(self, request: McpRequest, nursery: trio.Nursery) -> McpAnswer | None:
        """GET: the targets' standalone event streams merged (what servers say outside any call:
        list changes, resource updates, logs), each message as ``rewrite_outgoing`` makes it. None
        (405) when the session has no Streamable HTTP target offering one."""
        header = _header(request.headers, b"mcp-session-id")
        sessions = self.codec.decode(header) if header is not None else None
        if sessions is None:
            return None if header is None else _json_answer(
                rpc.error_message(None, rpc.SESSION_NOT_FOUND, "Session not found"), 404)
        replies: dict[str, TargetReply] = {}

        async def open_one(name: str, sid: str, version: str) -> None:
            reply = await self.http.listen(self.targets[name].url, session_id=sid, version=version)
            if reply is not None:
                replies[name] = reply

        async with trio.open_nursery() as opening:
            for name, (sid, version) in sessions.items():
                target = self.targets.get(name)
                if target is not None and target.transport == "mcp" and sid is not None:
                    opening.start_soon(open_one, name, sid, version)
        if not replies:
            return None
        send, receive = trio.open_memory_channel[bytes](64)

        async def pump(name: str, reply: TargetReply, send: trio.MemorySendChannel[bytes]) -> None:
            async with send:
                try:
                    async for message in reply.messages():
                        await send.send(_sse(self.rewrite_outgoing(name, message)))
                except TargetFailure:
                    pass
                finally:
                    with trio.CancelScope(shield=True):
                        await reply.aclose()

        async with send:
            for name, reply in replies.items():
                nursery.start_soon(pump, name, reply, send.clone())

        async def merged() -> AsyncIterator[bytes]:
            async with receive:
                async for chunk in receive:
                    yield chunk

        return McpAnswer(200, [SSE, (b"cache-control", b"no-cache")], stream=merged())

    async def _delete(self, request: McpRequest) -> McpAnswer:
        session_header = _header(request.headers, b"mcp-session-id")
        sessions = self.codec.decode(session_header) if session_header is not None else None
        if sessions is None:
            return _json_answer(rpc.error_message(None, rpc.SESSION_NOT_FOUND, "Session not found"), 404)
        await self._close(sessions)
        return McpAnswer(200, [])

    def rewrite_outgoing(self, target: str, message: dict[str, Any]) -> dict[str, Any]:
        """A target's message on its way to the client: a server request's id made unique to its
        target; resource URIs in contents prefixed."""
        if "method" in message and message.get("id") is not None:
            message = {**message, "id": f"tp~{self.index[target]}~{json.dumps(message['id'])}"}
        result = message.get("result")
        if self.spec.prefixed and isinstance(result, dict) and isinstance(result.get("contents"), list):
            contents = [{**c, "uri": self.expose(target, c["uri"], "resource")}
                        if isinstance(c, dict) and isinstance(c.get("uri"), str) else c for c in result["contents"]]
            message = {**message, "result": {**result, "contents": contents}}
        return message


class _Relayed:
    """A routed call's answer from its target, passed on to the client (whole, or as a stream)."""

    def __init__(self, relay: McpRelay, reply: TargetReply | ConnectionReply, id: Any, target: str, call: McpCall,
                 done: Callable[..., McpAnswer], temporary: TargetSessions | None) -> None:
        self.relay, self.reply, self.id, self.target, self.call = relay, reply, id, target, call
        self.done = done
        self.temporary = temporary

    def _outcome(self, message: dict[str, Any]) -> None:
        if "error" in message:
            self.call.result = "error"
            self.call.error = str((message.get("error") or {}).get("message"))
        elif isinstance(message.get("result"), dict) and message["result"].get("isError"):
            self.call.result = "error"
            self.call.error = "the tool reported an error"

    async def whole(self) -> McpAnswer:
        try:
            answer = await _response_of(self.reply, self.id)
        except TargetFailure as failure:
            raise rpc.JsonRpcError(rpc.INTERNAL_ERROR, f"MCP target '{self.target}' failed: {failure.reason}") \
                from None
        finally:
            await self.reply.aclose()
            if self.temporary is not None:
                await self.relay._close(self.temporary)
        self._outcome(answer)
        return self.done(_json_answer(self.relay.rewrite_outgoing(self.target, answer)))

    async def stream(self) -> AsyncIterator[bytes]:
        answered = False
        try:
            async for message in self.reply.messages():
                is_answer = "method" not in message and message.get("id") == self.id
                if is_answer:
                    self._outcome(message)
                yield _sse(self.relay.rewrite_outgoing(self.target, message))
                if is_answer:
                    answered = True
                    break
            if not answered:
                raise TargetFailure("the stream ended before the answer")
        except TargetFailure as failure:
            text = f"MCP target '{self.target}' failed: {failure.reason}"
            self.call.result, self.call.error = "error", text
            yield _sse(rpc.error_message(self.id, rpc.INTERNAL_ERROR, text))
        finally:
            with trio.CancelScope(shield=True):
                await self.reply.aclose()
                if self.temporary is not None:
                    await self.relay._close(self.temporary)
            self.done(McpAnswer(200, []))


def rpc_request(id: Any, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _cursors_out(cursors: dict[str, str]) -> str:
    """The gateway's cursor: each target's own, in one opaque string."""
    return base64.urlsafe_b64encode(json.dumps(cursors, separators=(",", ":")).encode()).decode().rstrip("=")


def _cursors_in(cursor: Any) -> dict[str, str] | None:
    if not isinstance(cursor, str):
        return None
    try:
        cursors = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:
        return None
    if not isinstance(cursors, dict) or not all(isinstance(v, str) for v in cursors.values()):
        return None
    return {str(k): v for k, v in cursors.items()}


def _server_request_id(id: Any) -> tuple[int, Any] | None:
    """(target index, the target's own id) of an id ``rewrite_outgoing`` made."""
    if not isinstance(id, str) or not id.startswith("tp~"):
        return None
    index, tilde, original = id[3:].partition("~")
    if not tilde or not index.isdigit():
        return None
    try:
        return int(index), json.loads(original)
    except ValueError:
        return None


async def _response_of(reply: TargetReply | ConnectionReply, id: Any) -> dict[str, Any]:
    """The response to ``id`` in a target's answer (notifications before it are dropped)."""
    async for message in reply.messages():
        if "method" not in message and message.get("id") == id:
            return message
    raise TargetFailure("answered without a response to the request")
