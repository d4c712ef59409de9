"""Configuration: the one description of the file (``document.py``), the loader that reads it
with positions (``loader.py``), the compile step to the frozen runtime model (``compile.py``,
``model.py``) and the JSON Schema (``schema.py``). How to add a field: docs/configuration-schema.md.
"""

from .loader import ConfigError, build_config, load_config, parse_config
from .model import Config

__all__ = ["Config", "ConfigError", "build_config", "load_config", "parse_config"]
