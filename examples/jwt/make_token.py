"""Print a JWT for the jwt example, signed with its example key: ``python make_token.py GROUP``."""

import sys
import time
from pathlib import Path

import jwt

KEY = (Path(__file__).parent / "example-key.pem").read_bytes()


def token(group: str, lifetime: int = 3600) -> str:
    now = int(time.time())
    claims = {"iss": "https://issuer.example", "aud": "example-api", "sub": "alice", "group": group,
              "iat": now, "exp": now + lifetime}
    return jwt.encode(claims, KEY, algorithm="ES256", headers={"kid": "example"})


if __name__ == "__main__":
    print(token(sys.argv[1] if len(sys.argv) > 1 else "eng"))
