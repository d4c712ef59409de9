"""trioproxy: a gateway proxy built on Trio structured concurrency."""

__version__ = "0.1.0"
__all__ = ["__version__"]
