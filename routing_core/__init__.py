"""The framework-neutral HTTP layer: route table, validation, auth and principals, errors.

Adapters for FastAPI, Flask and Django only translate requests and responses; all behaviour is
here, so the three mounts answer identically.
"""

from routing_core.http import CoreRequest, CoreResponse, Upload, error
from routing_core.router import ROUTES, AuthError, Route, Router, upload_limit_bytes

__all__ = [
    "ROUTES",
    "AuthError",
    "CoreRequest",
    "CoreResponse",
    "Route",
    "Router",
    "Upload",
    "error",
    "upload_limit_bytes",
]
