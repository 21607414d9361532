"""`Refused`: a store write that was not done, with a stable code the API maps to an HTTP status."""

from __future__ import annotations

from typing import Any


class Refused(Exception):
    """A write that was not done, with a stable machine code and a message for people."""

    def __init__(self, code: str, message: str, **details: Any):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
