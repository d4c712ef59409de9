"""What the gateway sends upstream in place of the client's head (policies/headers.py; pure).

The end-to-end tests see these through a real backend; these pin the edges a mutation run
found unguarded by the in-process tests (Expect, a forwarded-for without a client address,
framing of a chunked upload, comma-only Connection lists).
"""

from __future__ import annotations

from trioproxy.policies.headers import forwarded_request_headers, request_framing, without_hop_by_hop


def forward(headers, client=None, framing=None):  # type: ignore[no-untyped-def]
    return forwarded_request_headers(headers, client=client, scheme="http", framing=framing)


def test_expect_100_continue_is_answered_here_not_forwarded():
    """Only ``Expect: 100-continue`` (any case) is dropped; the headers after it still go."""
    out = forward([(b"expect", b"100-Continue"), (b"x-after", b"1")])
    assert out == [(b"x-after", b"1"), (b"x-forwarded-proto", b"http")]


def test_other_expectations_and_the_value_elsewhere_are_forwarded():
    out = forward([(b"expect", b"something-else"), (b"x-note", b"100-continue")])
    assert out == [(b"expect", b"something-else"), (b"x-note", b"100-continue"), (b"x-forwarded-proto", b"http")]


def test_x_forwarded_for_without_a_client_address_is_kept_and_what_follows_it_too():
    out = forward([(b"x-forwarded-for", b"10.0.0.1"), (b"x-after", b"1")])
    assert out == [(b"x-after", b"1"), (b"x-forwarded-for", b"10.0.0.1"), (b"x-forwarded-proto", b"http")]
    assert forward([], client="10.0.0.2") == [(b"x-forwarded-for", b"10.0.0.2"), (b"x-forwarded-proto", b"http")]


def test_a_chunked_upload_is_declared_chunked_upstream_whatever_the_codings():
    assert request_framing([(b"host", b"h"), (b"transfer-encoding", b"gzip, chunked")]) == (
        b"transfer-encoding", b"chunked")
    assert request_framing([(b"content-length", b"3")]) == (b"content-length", b"3")
    assert request_framing([(b"host", b"h")]) is None


def test_connection_tokens_are_split_on_commas_without_spaces():
    headers = [(b"connection", b"keep-alive,X-Secret"), (b"x-secret", b"1"), (b"x-kept", b"2")]
    assert without_hop_by_hop(headers) == [(b"x-kept", b"2")]
