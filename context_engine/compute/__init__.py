"""Compute over spreadsheets: the model writes pandas code, a static allow-list checks it, and a
separate worker process with CPU, memory and wall-clock limits runs it over every row.

Off by default (:class:`ComputeConfig` ``enable_code_execution``); a host ``code_runner`` (its own
isolation for the code) or ``runner`` (its own whole action) turns it on as well. Needs the
``compute`` extra (pandas).
"""

from context_engine.compute.action import CodeRunner, ComputeRunner, compute, compute_over_frames
from context_engine.compute.checker import check_code
from context_engine.compute.errors import ComputeDisabled, NoFrames, UnsafeCode
from context_engine.compute.frames import SPREADSHEET_MIMES, assign_keys, compute_suggestion, load_stored_frames
from context_engine.config import ComputeConfig

__all__ = [
    "SPREADSHEET_MIMES",
    "CodeRunner",
    "ComputeConfig",
    "ComputeDisabled",
    "ComputeRunner",
    "NoFrames",
    "UnsafeCode",
    "assign_keys",
    "check_code",
    "compute",
    "compute_over_frames",
    "compute_suggestion",
    "load_stored_frames",
]
