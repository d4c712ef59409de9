"""The runtime keys' errors: statuses, messages, and the client's dialect on LLM routes."""

from __future__ import annotations

import json

from trioproxy.errors import (
    ApiKeyAuthenticationFailed,
    KeyRefused,
    KeyStoreUnavailable,
    ModelNotAllowed,
    error_response,
)


def test_key_refused_is_an_api_key_failure_with_its_reason():
    error = KeyRefused("key revoked")
    assert isinstance(error, ApiKeyAuthenticationFailed) and error.reason == "key revoked"
    status, _, body = error_response(error)
    assert (status, body) == (401, b"api key authentication failure: key revoked")
    assert json.loads(error_response(error, "openai")[2])["error"]["type"] == "authentication_error"


def test_model_not_allowed_in_each_dialect():
    error = ModelNotAllowed("gpt-4o", "alice-laptop")
    assert error_response(error)[:3:2] == (403, b"model 'gpt-4o' is not allowed for key alice-laptop")
    openai = json.loads(error_response(error, "openai")[2])["error"]
    assert openai == {"message": "model 'gpt-4o' is not allowed for key alice-laptop", "type": "permission_error",
                      "param": None, "code": "model_not_allowed"}
    assert json.loads(error_response(error, "anthropic")[2])["error"]["type"] == "permission_error"
    assert json.loads(error_response(error, "gemini")[2])["error"]["status"] == "PERMISSION_DENIED"


def test_key_store_unavailable():
    error = KeyStoreUnavailable()
    assert error_response(error)[:3:2] == (503, b"key store unavailable")
    assert json.loads(error_response(error, "anthropic")[2])["error"]["type"] == "overloaded_error"
