"""The refusals and failures of the compute action, each with a stable code."""

from __future__ import annotations

from context_engine.errors import ContextEngineError, InvalidRequest


class ComputeDisabled(ContextEngineError):
    """Generated code may not run on this deployment (nor did the host hand over a runner)."""

    code = "compute_disabled"
    status = 501


class NoFrames(InvalidRequest):
    """Nothing to compute over: no spreadsheet in scope, or no frame was passed."""

    code = "no_frames"


class UnsafeCode(ContextEngineError):
    """The static checker refused the code; ``reasons`` says which constructs, one line each."""

    code = "unsafe_code"
    status = 422

    def __init__(self, reasons: list[str]):
        super().__init__("the generated code was refused: " + "; ".join(reasons[:5]), details={"reasons": reasons})
        self.reasons = reasons
