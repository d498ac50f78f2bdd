"""What the tests and the benchmarks share: scripted model servers on 127.0.0.1 (one per
provider wire), a throwaway PostgreSQL, a pseudo-terminal, and builders of histories,
messages and CLI runs. ``scripts/`` imports it as ``tests.support`` (``python -m scripts.X``
from the repository root)."""
