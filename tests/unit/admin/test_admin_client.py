"""``admin/client.py``: what the CLI's commands and the text UI share as clients of the admin API."""

from __future__ import annotations

import httpx
import pytest

from trioproxy.admin.client import AdminRefused, auth_headers, json_answer


def test_the_bearer_token_comes_from_admin_token_only_when_set():
    assert auth_headers({"ADMIN_TOKEN": "s3cret"}) == {"authorization": "Bearer s3cret"}
    assert auth_headers({}) is None
    assert auth_headers({"ADMIN_TOKEN": ""}) is None


def test_a_200_json_object_is_the_answer():
    assert json_answer(httpx.Response(200, json={"status": 200, "trace": []})) == {"status": 200, "trace": []}


@pytest.mark.parametrize(("response", "status", "detail"), [
    (httpx.Response(403, json={"error": "forbidden: token"}), 403, "forbidden: token"),  # the server's own error
    (httpx.Response(502, text="  upstream gone \n"), 502, "upstream gone"),  # not JSON: its text
    (httpx.Response(500, text=""), 500, "Internal Server Error"),  # nothing: the reason phrase
    (httpx.Response(200, json=["not", "an", "object"]), 200, "[\"not\",\"an\",\"object\"]"),
    (httpx.Response(404, json={"other": 1}), 404, "Not Found"),  # an object without error
])
def test_anything_else_is_refused_with_what_the_server_said(response, status, detail):
    with pytest.raises(AdminRefused) as refused:
        json_answer(response)
    assert (refused.value.status, refused.value.detail) == (status, detail)
    assert str(refused.value) == f"{status} {detail}"
