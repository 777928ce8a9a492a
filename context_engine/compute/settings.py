"""``ComputeConfig``: whether generated code may run at all, and the worker's limits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ComputeConfig(BaseModel):
    """Off by default: code the model writes runs only when a deployment turns this on on purpose."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    #: run generated code in the built-in worker process (a host ``code_runner`` works without it)
    enable_code_execution: bool = False
    #: CPU seconds the worker may use; past it the kernel stops the process
    cpu_seconds: int = Field(default=10, ge=1, le=600)
    #: wall-clock seconds before the worker's process group is killed
    wall_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: memory the generated code may add to the worker's address space once pandas is loaded
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    #: characters of the JSON result (and, separately, of printed output) kept; the rest is cut
    max_output_chars: int = Field(default=200_000, ge=1000, le=10_000_000)
    #: run the worker as this uid/gid (e.g. 65534) when the host runs as root, so the kernel's
    #: process-count limit applies to it; the uid must be able to execute the interpreter
    worker_uid: int | None = Field(default=None, ge=1)
    worker_gid: int | None = Field(default=None, ge=1)
    #: spreadsheets loaded per compute call (newest first)
    max_documents: int = Field(default=20, ge=1, le=500)
