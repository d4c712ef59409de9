"""The version, written once: pyproject.toml reads it, and the package, the CLI, metrics and spans
import it from here (not from the package, whose ``__init__`` imports the gateway that uses them)."""

__version__ = "0.1.0"
