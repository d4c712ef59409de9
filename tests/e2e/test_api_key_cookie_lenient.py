"""``apiKey`` read from a cookie: a malformed earlier cookie must not hide the key. The standard
library's ``SimpleCookie`` stops at the first piece it cannot parse, so ``a=b; junk; key=VALID``
was answered 401 ``no API Key found``; browsers and agentgateway skip the bad piece."""

from __future__ import annotations

import json

import pytest

from tests.conftest import free_port, start_routes


@pytest.mark.parametrize("cookie", [
    "theme=dark; junk; session=k1",
    'a="unterminated; session=k1',
    "a=b;;  ; =nameless; session=k1; tail",
    "x=[1,2]; session=k1",
])
async def test_a_malformed_earlier_cookie_does_not_hide_the_key(nursery, backend, cookie):
    gw = await start_routes(nursery, """
        - policies:
            apiKey: {{mode: strict, keys: [{{key: k1}}], location: {{cookie: {{name: session}}}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        answer = await client.get("/p", headers={"cookie": cookie})
        wrong = await client.get("/p", headers={"cookie": cookie.replace("k1", "k2")})
    assert (answer.status_code, wrong.status_code) == (200, 401)
    forwarded = [v for k, v in json.loads(answer.text)["headers"] if k == "cookie"]
    assert len(forwarded) == 1 and "k1" not in forwarded[0] and "session" not in forwarded[0]
    # the other pieces, malformed ones included, reach the backend as they were sent
    assert forwarded[0] == "; ".join(p.strip() for p in cookie.split(";") if p.strip() and p.strip() != "session=k1")
