"""Local demo OAI-PMH 2.0 data provider: deterministic synthetic corpus + stdlib HTTP server.

`python -m harvest_pipeline.demo` serves it on DEFAULT_URL; tests spawn it with
`start_demo_provider()` (a real subprocess on a free port).
"""

from .corpus import Corpus, CorpusConfig, RecordView
from .process import DemoProcess, start_demo_provider
from .server import OAIProvider, ServerOptions, make_server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def default_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """The OAI-PMH base URL of a demo provider started with default flags."""
    return f"http://{host}:{port}/oai"


DEFAULT_URL = default_url()

__all__ = [
    "Corpus", "CorpusConfig", "RecordView", "DemoProcess", "start_demo_provider", "OAIProvider",
    "ServerOptions", "make_server", "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_URL", "default_url",
]
