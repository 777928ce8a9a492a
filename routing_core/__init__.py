"""The framework-neutral HTTP layer: route table, request lifecycle, auth and principals, errors.

Adapters for FastAPI, Flask and Django only translate requests and responses; all behaviour is
here, so the three mounts answer identically.
"""

from routing_core.http import CoreRequest, CoreResponse, HttpError, Upload, error
from routing_core.router import AuthError, MountOptions, Router, upload_limit_bytes
from routing_core.routes import ROUTES, Route

__all__ = [
    "ROUTES",
    "AuthError",
    "CoreRequest",
    "CoreResponse",
    "HttpError",
    "MountOptions",
    "Route",
    "Router",
    "Upload",
    "error",
    "upload_limit_bytes",
]
