"""AES-256-GCM for tool configs at rest.

The key is derived from ``secret_key`` with HKDF-SHA256 (so the raw secret is never the cipher
key), every encryption draws a fresh 96-bit nonce, and the tool's id is the associated data: a
ciphertext copied onto another tool's row does not decrypt.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import SecretStr

from context_engine.errors import ConfigError
from context_engine.tools.errors import SecretKeyRequired, missing_extra

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:  # the ``tools`` extra is not installed; refused when a cipher is asked for
    AESGCM = None  # type: ignore[assignment,misc]

_VERSION = b"\x01"
_NONCE_BYTES = 12
_INFO = b"context-engine tool config v1"


class ConfigCipher:
    """Encrypts and decrypts one JSON config per tool under a key derived from ``secret_key``."""

    def __init__(self, secret_key: str | bytes | SecretStr | None):
        if AESGCM is None:
            raise missing_extra("tools", "cryptography")
        if isinstance(secret_key, SecretStr):
            secret_key = secret_key.get_secret_value()
        if secret_key is None or len(secret_key) == 0:
            raise SecretKeyRequired(
                "tool configs are encrypted at rest: set secret_key in the config (CE_SECRET_KEY) to register "
                "or run http, db or mcp tools"
            )
        raw = secret_key.encode() if isinstance(secret_key, str) else bytes(secret_key)
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(raw)
        self._aead = AESGCM(key)

    def encrypt(self, config: dict[str, Any], tool_id: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
        return _VERSION + nonce + self._aead.encrypt(nonce, plain, tool_id.encode())

    def decrypt(self, blob: bytes, tool_id: str) -> dict[str, Any]:
        if len(blob) < 1 + _NONCE_BYTES + 16 or blob[:1] != _VERSION:
            raise ConfigError("a stored tool config is not in a format this version reads")
        nonce, body = blob[1 : 1 + _NONCE_BYTES], blob[1 + _NONCE_BYTES :]
        try:
            plain = self._aead.decrypt(nonce, body, tool_id.encode())
        except InvalidTag:
            raise ConfigError(
                "a stored tool config does not decrypt under the configured secret_key (was the key changed?)",
                code="tool_config_undecryptable",
            ) from None
        return json.loads(plain)
