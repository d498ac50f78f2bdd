"""An MCP call's content as the text a tool result carries.

harness9's messages are text, so text passes as it is, a resource's text comes with its
URI, and what cannot be shown as text (an image, audio, a binary resource) is named with
its type and size, so the model knows it was there and what it was.
"""

from __future__ import annotations

import json
from typing import Any


def render_content(content: list[dict[str, Any]], structured: dict[str, Any] | None) -> str:
    parts = [_part(item) for item in content]
    parts = [p for p in parts if p]
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False, indent=1)
    return "\n".join(parts) if parts else "(no output)"


def _part(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind in ("image", "audio"):
        mime = item.get("mimeType", "")
        return f"[{kind} {mime}, {_b64_size(item.get('data', ''))} bytes, not shown: text only]"
    if kind == "resource":
        res = item.get("resource", {})
        uri = res.get("uri", "")
        if "text" in res:
            return f"[resource {uri}]\n{res['text']}"
        mime = res.get("mimeType", "")
        return f"[resource {uri}: {mime}, {_b64_size(res.get('blob', ''))} bytes, not shown]"
    if kind == "resource_link":
        name = item.get("name", "")
        return f"[resource link {item.get('uri', '')}{': ' + name if name else ''}]"
    return f"[{kind} content, not shown]"


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4 - data.count("=")
