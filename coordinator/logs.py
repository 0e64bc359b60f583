"""Logging: structlog for our own lines, and the standard library's (kazoo's among them)
routed through the same processors, so every line is JSON in production or readable
console output in a terminal: `auto` (the default) picks by whether stderr is a terminal,
`json` and `console` force one."""

from __future__ import annotations

import logging
import sys

import structlog

FORMATS = ("auto", "json", "console")


def configure(log_format: str = "auto", level: int = logging.INFO) -> None:
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {log_format!r}")
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = (structlog.processors.JSONRenderer() if log_format == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
