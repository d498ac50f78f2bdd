"""harness9: a terminal agent harness built around context engineering."""

__version__ = "0.1.0"
