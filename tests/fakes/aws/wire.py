"""Protocol helpers of the AWS fake's WSGI layer: pagination, SigV4 scope, error answers, price list filters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from werkzeug.wrappers import Request, Response


def page(items: list[Any], token: str | None, max_results: int | None, cap: int | None) -> tuple[list[Any], str | None]:
    start = int(token) if token else 0
    size = min(x for x in (max_results, cap, 1000) if x)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


def signed_region(authorization: str) -> str:
    # SigV4: "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/ec2/aws4_request, ..."
    try:
        return authorization.split("Credential=", 1)[1].split("/")[2]
    except IndexError:
        return ""


def signed_service(authorization: str) -> str:
    try:
        return authorization.split("Credential=", 1)[1].split("/")[3]
    except IndexError:
        return ""


def json_or_query_action(request: Request, body: bytes) -> str:
    target = request.headers.get("X-Amz-Target")
    if target:
        return target.split(".")[-1]
    return (parse_qs(body.decode("utf-8", "replace")).get("Action") or [""])[0]


def ec2_error(code: str, status: int, message: str) -> Response:
    xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
           f"<Message>{message}</Message></Error></Errors><RequestID>fake-0000</RequestID></Response>")
    return Response(xml, status, content_type="text/xml")


def json_error(code: str, status: int, message: str) -> Response:
    return Response(json.dumps({"__type": code, "Message": message}), status,
                    content_type="application/x-amz-json-1.1")


def matches(attributes: Mapping[str, str], filters: list[dict[str, str]]) -> bool:
    for f in filters:
        have, want, kind = attributes.get(f.get("Field", "")), f.get("Value", ""), f.get("Type", "TERM_MATCH")
        if kind in ("TERM_MATCH", "EQUALS"):
            ok = have == want
        elif kind == "CONTAINS":
            ok = have is not None and want in have
        elif kind == "ANY_OF":
            ok = have in [v.strip() for v in want.split(",")]
        elif kind == "NONE_OF":
            ok = have not in [v.strip() for v in want.split(",")]
        else:
            ok = False
        if not ok:
            return False
    return True
