"""Compare the two maintained CEL engines on typical gateway expressions.

Run from the repository root::

    python -m bench.cel_engines [--number N]

Engines:

* ``cel``   -- PyPI ``common-expression-language`` (Rust ``cel`` crate via PyO3)
* ``celpy`` -- PyPI ``cel-python`` (pure Python, Lark parser + tree-walking evaluator)
* ``trioproxy.cel`` -- the chosen engine (``cel``) behind trioproxy's wrapper, which hands
  the engine only the root variables / fields an expression references

For each expression the script prints the compile time (parse + check, once per
expression) and the evaluation time per request.  Evaluation includes handing the
per-request activation to the engine (the Rust binding converts the Python dict on
every ``execute``; cel-python needs ``json_to_cel`` on the activation first), since
every request brings a new activation.  For cel-python the time with a pre-converted
activation is shown as well.  The ``ok`` column compares the result with the expected
one (``error`` means the engine raised; a gateway treats that as "no match").
"""

from __future__ import annotations

import argparse
import statistics
import time

ACTIVATION = {
    "request": {
        "method": "POST",
        "path": "/v1/chat/completions",
        "host": "api.example.com",
        "scheme": "http",
        "uri": "http://api.example.com/v1/chat/completions",
        "headers": {
            "host": "api.example.com",
            "user-agent": "curl/8.5.0",
            "accept": "*/*",
            "content-type": "application/json",
            "content-length": "123",
            "x-trace-id": "abc",
        },
    },
    "source": {"address": "127.0.0.1", "port": 53422},
    "jwt": {"sub": "alice", "group": "admins", "iss": "https://idp.example.com"},
    "llm": {"model": "my-model", "provider": "openai"},
}

# (expression, expected result; ERROR = evaluation error expected/acceptable)
ERROR = object()
CASES = [
    ('request.headers["x-trace-id"] == "abc"', True),
    ('request.path.startsWith("/v1") && request.method == "POST"', True),
    ('jwt.group == "admins"', True),
    ('source.address == "127.0.0.1"', True),
    ('"x-user" in request.headers', False),
    ("llm.model", "my-model"),
    ('request.headers["x-missing"] == "abc"', ERROR),
    ('has(request.headers.foo)', False),
    ('request.path.endsWith("completions") && request.host.contains("example")', True),
    ('request.path.matches("^/v[0-9]+/chat")', True),
    ('has(jwt.group) && jwt.group == "admins" || request.headers["x-missing"] == "x"', True),
]


def timeit(fn, number: int) -> float:
    """Best-of-5 mean time of ``fn()`` in microseconds."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number * 1e6)
    return min(runs)


def rust_engine():
    import cel

    def compile_(src):
        return cel.compile(src)

    def evaluate(prog, act):
        return prog.execute(act)

    return "cel (common-expression-language)", compile_, evaluate, None


def celpy_engine():
    import celpy

    env = celpy.Environment()

    def compile_(src):
        return env.program(env.compile(src))

    def convert(act):
        return {k: celpy.json_to_cel(v) for k, v in act.items()}

    def evaluate(prog, act):
        result = prog.evaluate(convert(act))
        if isinstance(result, Exception):
            raise result
        return result

    def evaluate_preconverted(prog, cact):
        try:
            return prog.evaluate(cact)
        except Exception:  # noqa: BLE001 - missing keys raise CELEvalError
            return None

    return "celpy (cel-python)", compile_, evaluate, (convert, evaluate_preconverted)


def wrapper_engine():
    """trioproxy.cel on top of the Rust engine: passes only the referenced roots/fields."""
    from trioproxy.cel import CelEvaluationError, compile_expression

    def evaluate(prog, act):
        try:
            return prog.evaluate_strict(act)
        except CelEvaluationError as exc:
            raise RuntimeError(str(exc)) from None

    return "trioproxy.cel (wraps cel)", compile_expression, evaluate, None


def check(expected, fn) -> str:
    try:
        got = fn()
    except Exception:  # noqa: BLE001 - engine errors are part of the comparison
        return "ok" if expected is ERROR else "error"
    if isinstance(got, Exception):
        return "ok" if expected is ERROR else "error"
    if expected is ERROR:
        return f"no error ({got!r})"
    return "ok" if got == expected and type(bool(got)) is bool else f"got {got!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="iterations per timing run")
    args = parser.parse_args()
    n = args.number

    rows = []
    for engine in (rust_engine, celpy_engine, wrapper_engine):
        name, compile_, evaluate, extra = engine()
        for src, expected in CASES:
            compile_us = timeit(lambda: compile_(src), max(n // 10, 20))
            prog = compile_(src)
            ok = check(expected, lambda: evaluate(prog, ACTIVATION))

            def run():
                try:
                    evaluate(prog, ACTIVATION)
                except Exception:  # noqa: BLE001
                    pass

            eval_us = timeit(run, n)
            pre = ""
            if extra is not None:
                convert, evaluate_pre = extra
                cact = convert(ACTIVATION)
                pre = f"{timeit(lambda: evaluate_pre(prog, cact), n):.1f}"
            rows.append((name, src, compile_us, eval_us, pre, ok))

    w = max(len(r[1]) for r in rows)
    header = f"{'engine':34} {'expression':{w}} {'compile µs':>11} {'eval µs':>9} {'eval µs*':>9}  ok"
    print(header)
    print("-" * len(header))
    for name, src, c, e, pre, ok in rows:
        print(f"{name:34} {src:{w}} {c:11.1f} {e:9.1f} {pre:>9}  {ok}")
    print()
    for name in dict.fromkeys(r[0] for r in rows):
        cs = [r[2] for r in rows if r[0] == name]
        es = [r[3] for r in rows if r[0] == name]
        print(f"{name:34} median compile {statistics.median(cs):8.1f} µs   median eval {statistics.median(es):7.1f} µs")
    print("\neval µs* = cel-python with an activation already converted by json_to_cel")
    print("ok = result as expected; 'error' entries are expected for missing map keys")


if __name__ == "__main__":
    main()
