"""AdmissionReview v1 in and out: the request the API server sends, the verdict we return.

Why it exists: the webhook's rules are pure functions; this module is the thin
envelope around them, turning the JSON the API server POSTs into an
:class:`AdmissionRequest` and a :class:`Verdict` back into the JSON it
expects.

What must stay true: the response echoes the request's ``uid`` and
``apiVersion``; a patch is sent only with ``allowed: true``, as a base64 JSON
Patch with ``patchType: JSONPatch``; a denial carries a ``status`` whose
``message`` the user sees verbatim (``kubectl`` prints "admission webhook ...
denied the request: <message>"); a body that is not an AdmissionReview is a
:class:`BadReview` (the server answers 400), never a guess.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queuemgr.k8s.patch import Patch

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """A body that is not an AdmissionReview v1 request."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmissionRequest:
    uid: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    namespace: str
    name: str
    sub_resource: str
    user: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    allowed: bool
    message: str = ""
    code: int = 200
    reason: str = ""
    patch: Patch = field(default_factory=Patch)
    warnings: tuple[str, ...] = ()


def allow(patch: Patch | None = None, warnings: tuple[str, ...] = ()) -> Verdict:
    return Verdict(allowed=True, patch=patch or Patch(), warnings=warnings)


def deny(message: str, *, code: int = 403, reason: str = "Forbidden") -> Verdict:
    return Verdict(allowed=False, message=message, code=code, reason=reason)


def _object(raw: object, what: str) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise BadReview(f"request.{what} is not an object")
    return raw


def parse_review(body: bytes | str | Mapping[str, Any]) -> AdmissionRequest:
    """The request inside an AdmissionReview (raw JSON or already decoded)."""
    if isinstance(body, bytes | str):
        try:
            review = json.loads(body)
        except ValueError as error:
            raise BadReview(f"not JSON: {error}") from None
    else:
        review = body
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        raise BadReview("not an AdmissionReview")
    if review.get("apiVersion") != API_VERSION:
        raise BadReview(
            f"AdmissionReview {review.get('apiVersion')!r}; only {API_VERSION} is spoken"
        )
    request = review.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise BadReview("AdmissionReview without request.uid")
    user = request.get("userInfo")
    return AdmissionRequest(
        uid=request["uid"],
        operation=str(request.get("operation", "")),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        sub_resource=str(request.get("subResource") or ""),
        user=str(user.get("username", "")) if isinstance(user, Mapping) else "",
        object=_object(request.get("object"), "object"),
        old_object=_object(request.get("oldObject"), "oldObject"),
        dry_run=bool(request.get("dryRun")),
    )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview the API server expects back."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.allowed and verdict.patch:
        body = json.dumps(verdict.patch.as_json(), separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(body).decode("ascii")
    if not verdict.allowed:
        response["status"] = {
            "status": "Failure",
            "code": verdict.code,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
