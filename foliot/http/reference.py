"""`GET /reference`: the OpenAPI document rendered as one self-contained HTML page.

Made on the server from the same document `/openapi.json` serves (no script, no CDN, no
asset to fetch): every operation with its parameters, body and answers, then every schema
as its JSON. Each schema has an anchor (`#schema-RunView`) the operations link to.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:1rem 2rem;color:#1d232a}
h1{margin-bottom:.2rem}h2{margin-top:2.5rem;border-bottom:1px solid #ccd}
.op{border:1px solid #dde;border-radius:6px;margin:.8rem 0;padding:.5rem .9rem}
.m{display:inline-block;min-width:4.5rem;font-weight:700;font-family:monospace}
.get{color:#1a6}.post{color:#26c}.put{color:#a60}.patch{color:#a0a}.delete{color:#c22}
code,pre{font-family:ui-monospace,monospace;font-size:13px}
pre{background:#f5f6f8;padding:.6rem;overflow-x:auto;border-radius:4px}
table{border-collapse:collapse}td,th{padding:.15rem .6rem;text-align:left;vertical-align:top}
.who{color:#667;font-size:13px}nav a{margin-right:1rem}
"""


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _schema_link(schema: dict[str, Any]) -> str:
    name = _ref_name(schema)
    if name is not None:
        return f'<a href="#schema-{escape(name)}"><code>{escape(name)}</code></a>'
    return f"<code>{escape(json.dumps(schema, ensure_ascii=False))}</code>"


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [
        f'<div class="op" id="{escape(op["operationId"])}">',
        f'<span class="m {method}">{method.upper()}</span> <code>{escape(path)}</code>',
        f" — {escape(op['summary'])}",
        f' <span class="who">{"bearer token" if op.get("security") else "no key"}</span>',
    ]
    params = op.get("parameters") or []
    if params:
        parts.append("<table><tr><th>parameter</th><th>in</th><th>schema</th></tr>")
        for p in params:
            parts.append(
                f"<tr><td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
                f"<td>{_schema_link(p['schema'])}</td></tr>"
            )
        parts.append("</table>")
    body = op.get("requestBody")
    if body is not None:
        schema = body["content"]["application/json"]["schema"]
        optional = "" if body.get("required") else " (optional)"
        parts.append(f"<div>body{optional}: {_schema_link(schema)}</div>")
    answers = []
    for status, answer in op["responses"].items():
        for media, content in (answer.get("content") or {}).items():
            answers.append(f"<code>{escape(status)}</code> {escape(media)} {_schema_link(content['schema'])}")
    parts.append("<div>answers: " + "; ".join(answers) + "</div></div>")
    return "".join(parts)


def render(document: dict[str, Any]) -> str:
    """The page for `document` (an OpenAPI 3.1 document as `openapi.document` makes it)."""
    info = document["info"]
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{escape(info['title'])} API reference</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(info['title'])} API</h1><p>version {escape(str(info['version']))} · ",
        '<a href="/openapi.json">/openapi.json</a> · ',
        '<a href="/schemas/workflow.json">workflow definition JSON Schema</a></p>',
        '<nav><a href="#operations">Operations</a><a href="#schemas">Schemas</a></nav>',
        '<h2 id="operations">Operations</h2>',
    ]
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            out.append(_operation(method, path, op))
    out.append('<h2 id="schemas">Schemas</h2>')
    for name, schema in document["components"]["schemas"].items():
        text = json.dumps(schema, indent=2, ensure_ascii=False)
        out.append(f'<h3 id="schema-{escape(name)}">{escape(name)}</h3><pre>{escape(text)}</pre>')
    out.append("</body></html>")
    return "".join(out)
