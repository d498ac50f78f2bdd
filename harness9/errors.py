"""Errors a user can cause. The CLI maps them to one line on stderr and an exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    INTERRUPTED = 130


class HarnessError(Exception):
    """An expected failure: printed as one line, no traceback (unless --debug)."""

    exit_code: ExitCode = ExitCode.ERROR


class UsageError(HarnessError):
    exit_code = ExitCode.USAGE


class ConfigError(HarnessError):
    """``config.toml`` cannot be read or holds a bad value; the message names the file or key."""
