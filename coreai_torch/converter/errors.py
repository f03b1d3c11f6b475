"""Conversion errors that point at the user's own source lines."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import torch.fx as fx

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str
    code: str

    def __str__(self) -> str:
        text = f"{self.file}:{self.line} in {self.function}"
        return f"{text}: {self.code}" if self.code else text


def source_line(node: fx.Node) -> SourceLine | None:
    """The innermost user frame recorded for a node (``meta["stack_trace"]``)."""
    trace = node.meta.get("stack_trace")
    return _innermost_frame(trace) if trace else None


@functools.lru_cache(maxsize=4096)
def _innermost_frame(trace: str) -> SourceLine | None:
    # The nodes of one source line (a layer's code, run once per layer) share
    # their trace: parse each once.
    lines = trace.rstrip().splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = _FRAME.search(lines[index])
        if match:
            code = ""
            if index + 1 < len(lines) and not _FRAME.search(lines[index + 1]):
                code = lines[index + 1].strip()
            return SourceLine(match["file"], int(match["line"]), match["func"], code)
    return None


def describe_target(node: fx.Node) -> str:
    target = node.target
    name = getattr(target, "name", None)
    if callable(name):
        return name()
    return getattr(target, "__name__", str(target))


class UnsupportedOpsError(ValueError):
    """Raised once per conversion, listing every op that has no lowering."""

    def __init__(self, nodes: list[fx.Node]) -> None:
        self.nodes = nodes
        by_op: dict[str, list[fx.Node]] = {}
        for node in nodes:
            by_op.setdefault(describe_target(node), []).append(node)
        lines = [f"{len(by_op)} op(s) in the program have no Core AI lowering:"]
        for op, users in by_op.items():
            lines.append(f"  {op}")
            for node in users:
                where = source_line(node)
                lines.append(f"    node {node.name}: {where or 'no source line recorded'}")
        lines.append(
            "Provide a lowering with @converter.register_torch_lowering('<namespace>::<op>."
            "<overload>') (the names above), or rewrite the model to avoid these ops."
        )
        super().__init__("\n".join(lines))


def lowering_context(node: fx.Node) -> str:
    """One line naming the node being lowered and where the user wrote it."""
    where = source_line(node)
    location = f" (from {where})" if where else ""
    return f"while lowering node {node.name} ({describe_target(node)}){location}"
