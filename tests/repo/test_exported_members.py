"""The package's public names are exactly ``__all__`` (httpx's test of the same name)."""

import trioproxy


def test_all_is_exactly_the_public_api():
    public = {name for name in dir(trioproxy) if not name.startswith("_") and not _is_submodule(name)}
    assert set(trioproxy.__all__) - {"__version__"} == public


def test_every_exported_name_resolves():
    for name in trioproxy.__all__:
        assert getattr(trioproxy, name) is not None


def _is_submodule(name: str) -> bool:
    import types

    return isinstance(getattr(trioproxy, name), types.ModuleType)
