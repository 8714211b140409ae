"""What the Kubernetes API server does to a request, apart from storing things: selector matching, merge
patches, label validation, the RBAC attributes of a request, and ``Status`` bodies for errors.

Written from the API server's documented behaviour, independently of Slicewise's own code, so the stand-in
checks the backend rather than agreeing with it by construction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
# The API server's validation of label keys (optional DNS-subdomain prefix + name) and values.
_LABEL_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
# Pod fields the API server accepts in a field selector (pkg/registry/core/pod/strategy.go).
_POD_FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.restartPolicy": ("spec", "restartPolicy"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
    "status.nominatedNodeName": ("status", "nominatedNodeName"),
}


class ApiError(Exception):
    """Answered to the client as a ``Status`` object with this code."""

    def __init__(self, code: int, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = dict(details or {})


def permission_for(method: str, path: str, query: Mapping[str, list[str]] | None = None) -> Permission:
    """The (apiGroup, resource, verb) the RBAC authorizer checks for a request (subresources as
    ``pods/eviction``)."""
    segments = [s for s in path.split("/") if s]
    if segments[:1] == ["api"]:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"]:
        group, rest = segments[1], segments[3:]
    else:
        return ("", path, method.lower())
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if method == "GET":
        watching = (query or {}).get("watch", ["false"])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = verbs.get(method, method.lower())
        if method == "DELETE" and name is None:
            verb = "deletecollection"
    return (group, resource, verb)


def status_body(code: int, message: str, details: Mapping[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        status["details"] = dict(details)
    return status


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place: objects merge, null deletes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        elif isinstance(value, dict):
            target[key] = {}
            merge_patch(target[key], value)
        else:
            target[key] = value


def has_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(has_list(v) for v in value.values())


def validate_labels(node: str, labels: Mapping[str, Any]) -> None:
    for key, value in labels.items():
        if not isinstance(value, str) or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ApiError(422, f'Node "{node}" is invalid: metadata.labels: Invalid value: "{key}={value}"')


def _split_terms(selector: str) -> list[str]:
    """Split a selector at the commas that are not inside ``in (...)`` value sets."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current.strip())
    return terms


_SET_TERM = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_KEY_ONLY = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s()!=,]+)$")
Requirement = tuple[str, str, frozenset[str]]  # (key, operator, values), operators as in LabelSelector


def label_selector(selector: str) -> Callable[[Mapping[str, str]], bool]:
    """A label selector string (apimachinery/pkg/labels/selector.go syntax) as a predicate on labels."""
    requirements: list[Requirement] = []
    for term in _split_terms(selector):
        set_term, key_only = _SET_TERM.match(term), _KEY_ONLY.match(term)
        if set_term:
            values = frozenset(v.strip() for v in set_term["values"].split(",") if v.strip())
            operator = "In" if set_term["op"] == "in" else "NotIn"
            requirements.append((set_term["key"], operator, values))
        elif key_only:
            requirements.append(
                (key_only["key"], "DoesNotExist" if key_only["neg"] else "Exists", frozenset())
            )
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            requirements.append((key, "NotIn", frozenset({value})))
        elif "=" in term:
            key, value = (s.strip() for s in re.split(r"==?", term, maxsplit=1))
            requirements.append((key, "In", frozenset({value})))
        else:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
    return lambda labels: all(_holds(labels, *requirement) for requirement in requirements)


def _holds(labels: Mapping[str, str], key: str, operator: str, values: Collection[str]) -> bool:
    """One selector requirement; an operator nobody defined never holds."""
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def field_selector(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """A pod field selector (``=``, ``==``, ``!=`` on the supported fields) as a predicate on pods."""
    terms: list[tuple[str, str, str, bool]] = []  # (section, key, value, negated)
    for term in _split_terms(selector):
        field_name, value = (s.strip() for s in re.split(r"!=|==?", term, maxsplit=1))
        if field_name not in _POD_FIELDS:
            raise ApiError(400, f"field label not supported: {field_name}")
        terms.append((*_POD_FIELDS[field_name], value, "!=" in term))
    return lambda pod: all(
        (str((pod.get(section) or {}).get(key, "")) == value) != negated
        for section, key, value, negated in terms
    )


def structured_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``LabelSelector`` object against labels; an empty selector matches all, a null one nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        _holds(labels, r["key"], r["operator"], frozenset(r.get("values") or []))
        for r in selector.get("matchExpressions") or []
    )
