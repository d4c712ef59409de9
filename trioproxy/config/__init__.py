"""Configuration: the frozen model and the loader that builds it."""

from .loader import ConfigError, build_config, load_config, parse_config
from .model import Config

__all__ = ["Config", "ConfigError", "build_config", "load_config", "parse_config"]
