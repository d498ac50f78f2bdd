"""harness9: a terminal agent harness built around context engineering."""

__version__ = "0.2.0"
