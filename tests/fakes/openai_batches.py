"""A fake OpenAI-compatible batch service on the scriptable test server.

``FakeBatchServer`` implements the parts of an OpenAI-compatible server a batch job touches: a
multipart upload to ``/v1/files``, job creation and polling on ``/v1/batches``, and the output file
on ``/v1/files/{id}/content``, which it writes by embedding each uploaded line (with the same
hashed vectors as the synchronous fake) and listing the replies in reverse order, so pairing by
``custom_id`` rather than by line order is what the tests check.
"""

from __future__ import annotations

import email
import email.policy
import itertools
import json
from typing import Any

from tests.fakes.http_server import FakeHTTPServer, Target, fake_vector, json_reply


class FakeBatchServer:
    """Files and batches, scripted per test through ``states`` and ``output``."""

    def __init__(self, server: FakeHTTPServer, dim: int = 8):
        self.server = server
        self.dim = dim
        self.files: dict[str, bytes] = {}
        self.purposes: dict[str, str] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        #: the status each poll reports, in turn (the last repeats); "completed" writes the output
        self.states: list[str] = ["in_progress", "completed"]
        #: rewrites the output lines before they are served (drop, repeat, corrupt...)
        self.output = lambda lines: list(reversed(lines))
        self._ids = itertools.count(1)
        #: the jobs a client asked to cancel, in order
        self.cancelled: list[str] = []
        server.route("POST", "/v1/files", self.upload)
        server.route("POST", "/v1/batches", self.create)

    def upload(self, _body: Any, headers: dict[str, str], _target: Target) -> Any:
        raw = self.server.requests_to("/v1/files", "POST")[-1].body
        message = email.message_from_bytes(
            f"Content-Type: {headers['content-type']}\r\n\r\n".encode() + raw, policy=email.policy.HTTP
        )
        fields = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        file_id = f"file-in-{next(self._ids)}"
        self.files[file_id] = fields["file"].get_payload(decode=True)
        self.purposes[file_id] = fields["purpose"].get_content().strip()
        return 200, {}, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(self.files[file_id])}

    def create(self, body: Any, _headers: dict[str, str], _target: Target) -> Any:
        batch_id = f"batch_{next(self._ids)}"
        lines = self.files[body["input_file_id"]].decode().splitlines()
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": body["completion_window"],
            "metadata": body.get("metadata"),
            "status": "validating",
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "output_file_id": None,
            "error_file_id": None,
        }
        self.batches[batch_id] = batch
        polls = itertools.count()
        self.server.route("GET", f"/v1/batches/{batch_id}", lambda *_: self.poll(batch_id, next(polls)))
        self.server.route("POST", f"/v1/batches/{batch_id}/cancel", lambda *_: self.cancel(batch_id))
        return 200, {}, batch

    def cancel(self, batch_id: str) -> Any:
        """As the provider does: a job still running is cancelled, one that has ended refuses."""
        batch = self.batches[batch_id]
        if batch["status"] in ("completed", "failed", "expired", "cancelled"):
            return 400, {}, {"error": {"message": f"batch {batch_id} cannot be cancelled: {batch['status']}"}}
        self.cancelled.append(batch_id)
        batch["status"] = "cancelling"
        return 200, {}, batch

    def poll(self, batch_id: str, number: int) -> Any:
        batch = self.batches[batch_id]
        state = self.states[min(number, len(self.states) - 1)]
        batch["status"] = state
        if state == "completed" and batch["output_file_id"] is None:
            lines = self.files[batch["input_file_id"]].decode().splitlines()
            replies = [self.reply(json.loads(line)) for line in lines]
            output_id = f"file-out-{next(self._ids)}"
            body = "".join(json.dumps(r) + "\n" for r in self.output(replies))
            self.server.route("GET", f"/v1/files/{output_id}/content", json_reply(200, body.encode()))
            batch["output_file_id"] = output_id
            batch["request_counts"] = {"total": len(lines), "completed": len(lines), "failed": 0}
        return 200, {}, batch

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        width = int(request["body"].get("dimensions") or self.dim)
        vector = fake_vector(request["body"]["input"], width)
        return {
            "id": f"req-{request['custom_id']}",
            "custom_id": request["custom_id"],
            "response": {
                "status_code": 200,
                "request_id": "r",
                "body": {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": vector}]},
            },
            "error": None,
        }
