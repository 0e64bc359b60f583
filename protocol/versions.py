"""Kafka's version-range notation ("0+", "3-5", "7", "none") as a small value type."""

from __future__ import annotations

from dataclasses import dataclass

_OPEN = 1 << 15  # versions are int16: "3+" runs to the largest one


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int  # inclusive; low > high means "none"

    @classmethod
    def parse(cls, text: str) -> Versions:
        text = text.strip()
        if text == "none":
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), _OPEN)
        low, sep, high = text.partition("-")
        return cls(int(low), int(high) if sep else int(low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __bool__(self) -> bool:
        return self.low <= self.high

    def __str__(self) -> str:
        if not self:
            return "none"
        if self.high == _OPEN:
            return f"{self.low}+"
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


NONE = Versions(1, 0)
ALL = Versions(0, _OPEN)
