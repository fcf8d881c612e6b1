"""What the JSON report kinds (profile, sweep, advise) share: `to_dict`, `to_json` and `from_dict`
through rooflinekit.core.codec, older schema versions upgraded on the way in, and the views for
people (rooflinekit.core.views)."""

from __future__ import annotations

import json
from typing import TypeVar

from rooflinekit.core import codec
from rooflinekit.core.views import HasViews

_Kind = TypeVar("_Kind", bound="ReportBase")


class ReportBase(HasViews):
    """A report kind written as JSON field by field (its dataclass fields, in order)."""

    def to_dict(self) -> dict:
        """The JSON-ready dict the CLI writes with `-f json` (non-finite numbers become null)."""
        return codec.encode(self)

    def to_json(self, indent: int | None = 2) -> str:
        """The `-f json` text (codec.dumps's layout); `indent=None`: all on one line."""
        if indent is None:
            return json.dumps(self.to_dict(), allow_nan=False) + "\n"
        return codec.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def upgraded(cls, data: dict) -> dict:
        """`data` written by an older schema version in the current shape (a copy where it differs):
        deployment settings moved out of the workload (schema 3.0)."""
        return codec.upgrade_deployment(data)

    @classmethod
    def from_dict(cls: type[_Kind], data: dict) -> _Kind:
        """A report of this kind from its JSON form, older schema versions upgraded first."""
        return codec.decode(cls, cls.upgraded(data))
