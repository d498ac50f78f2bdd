"""Plain coercion for harness9's scalar options, so a command does not import pydantic.

Typer 0.29 coerces every non-flag option through a pydantic ``TypeAdapter``;
importing that machinery costs 100-200 ms here, more than everything else
``harness9 sessions list`` does, and that command runs from cron. Our options
are plain ``str``/``int``/``float``/``Path``/``bool`` values (optionally ``None``,
optionally with ``min``/``max``), whose coercion is a one-liner, so ``main()``
pre-installs a small runtime parameter on exactly those. Anything else, or a
Typer whose internals differ from what this expects, keeps Typer's own path:
the worst case is the old speed, never a wrong value.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

_SCALARS = (str, int, float, Path, bool)
_BOOL_WORDS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


def install(command: Any) -> int:
    """Give every plain scalar parameter of ``command`` (and its subcommands) fast coercion.

    Returns how many parameters were given it; 0 when this Typer is not one it knows.
    """
    try:
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
    except ImportError:
        return 0
    runtime = _runtime_param_class(RuntimeParam, BadParameter)

    def fast(param: Any) -> bool:
        kind = _scalar_kind(param)
        if kind is None:
            return False
        desc = param.type_descriptor
        param._runtime_param = runtime(
            annotation=desc.annotation, parameter_info=desc.parameter_info, kind=kind
        )
        return True

    count = 0
    stack = [command]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        count += sum(fast(param) for param in getattr(cmd, "params", ()))
        # Each command makes its --help option when parsing; it is a bool option too.
        make_help = getattr(cmd, "get_help_option", None)
        if make_help is not None:
            cmd.get_help_option = _with_fast_help(make_help, fast)
    return count


def _with_fast_help(make_help: Any, fast: Any) -> Any:
    def get_help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            fast(option)
        return option

    return get_help_option


def _scalar_kind(param: Any) -> type | None:
    desc = getattr(param, "type_descriptor", None)
    if desc is None or getattr(param, "_runtime_param", 0) is not None:
        return None
    if desc.file_annotation is not None or param.multiple or param.nargs != 1:
        return None
    info = desc.parameter_info
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    annotation = desc.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            return None
        annotation = args[0]
    return annotation if annotation in _SCALARS else None


_CLASS_CACHE: dict[tuple[type, type], type] = {}


def _runtime_param_class(base: type, bad_parameter: type) -> type:
    key = (base, bad_parameter)
    if key in _CLASS_CACHE:
        return _CLASS_CACHE[key]

    @dataclass(frozen=True)
    class ScalarRuntimeParam(base):  # type: ignore[misc, valid-type]
        annotation: Any
        parameter_info: Any
        kind: type

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            kind = self.kind
            if kind is bool:
                if isinstance(value, bool):
                    return value
                word = str(value).strip().lower()
                if word not in _BOOL_WORDS:
                    raise bad_parameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)
                return _BOOL_WORDS[word]
            if isinstance(value, kind) and not isinstance(value, bool):
                result = value
            else:
                try:
                    result = kind(value)
                except (TypeError, ValueError):
                    name = {int: "integer", float: "float", str: "text", Path: "path"}[kind]
                    raise bad_parameter(
                        f"{value!r} is not a valid {name}.", ctx=ctx, param=param
                    ) from None
            info = self.parameter_info
            low, high = getattr(info, "min", None), getattr(info, "max", None)
            if low is not None and result < low:
                if not getattr(info, "clamp", False):
                    raise bad_parameter(
                        f"{result} is smaller than the minimum {low}.", ctx=ctx, param=param
                    )
                result = kind(low)
            if high is not None and result > high:
                if not getattr(info, "clamp", False):
                    raise bad_parameter(
                        f"{result} is larger than the maximum {high}.", ctx=ctx, param=param
                    )
                result = kind(high)
            return result

    _CLASS_CACHE[key] = ScalarRuntimeParam
    return ScalarRuntimeParam
