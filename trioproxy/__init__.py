"""trioproxy: a gateway proxy built on Trio structured concurrency.

The public API for embedding the gateway (tests do exactly this)::

    config = trioproxy.load_config("gateway.yaml")
    info = await nursery.start(trioproxy.serve_gateway, config)
"""

from .config import Config, ConfigError, load_config, parse_config
from .errors import ProxyError
from .frontend.server import ServerInfo, StartupError, serve_gateway
from .proxy.gateway import Gateway
from .proxy.runtime import Runtime
from .telemetry.trace import TraceHub
from .version import __version__

__all__ = [
    "Config",
    "ConfigError",
    "Gateway",
    "ProxyError",
    "Runtime",
    "ServerInfo",
    "StartupError",
    "TraceHub",
    "__version__",
    "load_config",
    "parse_config",
    "serve_gateway",
]
