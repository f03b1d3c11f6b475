"""Runs every benchmark and prints one markdown table.

    python benchmarks/run_all.py [--smoke] [--json FILE] [--only PART...]

1. the Python benchmarks: ``bench_cpu.run``, ``bench_cuda.run`` (rows only when torch
   sees a CUDA GPU), ``bench_mps.run`` (rows only where Metal 4 kernels run on an
   Apple GPU) and, when present, ``bench_conversion.run`` and
   ``bench_debug_checks.run``;
2. the C++ harness: renders the kernels (``cpp/render_kernels.py``), builds the
   harness with ``scripts/cpp_build.py`` (into ``build/cpp``, shared with the C++
   tests; only what changed is rebuilt), and runs it.

The table starts with a line describing the machine. ``--smoke`` runs every
benchmark once at tiny sizes (the numbers then mean nothing; the tests use it to
keep every benchmark working, one part at a time with ``--only``). A benchmark
that fails is reported on stderr and the command exits non-zero after printing
the rows it has.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(HERE / "cpp"), str(ROOT / "scripts")]

import cpp_build  # noqa: E402  (scripts/, put on the path above)

COLUMNS = ("metric", "ours", "baseline", "ratio", "target", "pass")


# ------------------------------------------------------------------ machine


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kernel_compiler() -> str:
    """The first line of ``--version`` of the clang++ the CPU backend is likely to pick."""
    names = [os.environ.get("COREAI_TORCH_CXX", "")]
    names += [f"clang++-{major}" for major in range(19, 14, -1)] + ["clang++"]
    for name in names:
        if name and shutil.which(name):
            out = subprocess.run([name, "--version"], capture_output=True, text=True).stdout
            return out.splitlines()[0] if out else name
    return "no clang++ found"


def harness_compiler() -> str:
    for path in cpp_build.BUILD_DIR.glob("CMakeFiles/*/CMakeCXXCompiler.cmake"):
        text = path.read_text()
        ident = re.search(r'set\(CMAKE_CXX_COMPILER_ID "([^"]*)"\)', text)
        version = re.search(r'set\(CMAKE_CXX_COMPILER_VERSION "([^"]*)"\)', text)
        if ident and version:
            return f"{ident.group(1)} {version.group(1)}"
    return "not built"


def machine_line(load: float) -> str:
    """``load``: the 1-minute load average before the benchmarks started."""
    import torch

    gpu = ""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = (
            f"; GPU: {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} "
            f"SMs), torch CUDA {torch.version.cuda}"
        )
    return (
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} intra-op "
        f"threads, load {load:.2f}; {platform.system()} {platform.release()}; python "
        f"{platform.python_version()}, torch {torch.__version__}; kernels: {kernel_compiler()}; "
        f"harness: {harness_compiler()}{gpu}"
    )


# --------------------------------------------------------------- benchmarks


PYTHON_PARTS = ("bench_cpu", "bench_cuda", "bench_mps", "bench_conversion", "bench_debug_checks")
CPP_PART = "cpp"
PARTS = (*PYTHON_PARTS, CPP_PART)


def python_rows(smoke: bool, errors: list[str], parts: tuple[str, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for module in PYTHON_PARTS:
        if module not in parts:
            continue
        try:
            rows += importlib.import_module(module).run(smoke)
        except Exception:
            errors.append(f"{module}.run failed:\n{traceback.format_exc()}")
    return rows


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        output = f"{done.stdout}\n{done.stderr}".strip()
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{output}")
    return done.stdout


def harness() -> Path:
    """The harness executable, built if anything it depends on changed."""
    build_dir = cpp_build.build((cpp_build.HARNESS,))
    return build_dir / "benchmarks" / "cpp" / cpp_build.HARNESS


def cpp_rows(smoke: bool, errors: list[str]) -> list[dict[str, Any]]:
    try:
        import render_kernels  # benchmarks/cpp/, put on the path at the top

        kernel_dir = cpp_build.BUILD_DIR / "kernels"
        render_kernels.write_all(kernel_dir)
        cmd = [str(harness()), "--kernels", str(kernel_dir), "--json"]
        return json.loads(_run(cmd + (["--smoke"] if smoke else [])))["rows"]
    except Exception:
        errors.append(f"C++ harness failed:\n{traceback.format_exc()}")
        return []


# ------------------------------------------------------------------- table


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "pass" if value else "FAIL"
    if isinstance(value, str):
        return value
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if a >= 0.1 else f"{v:.3g}"


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = "-" if r.get("ratio") is None else number(r["ratio"]) + "x"
        cells = [
            str(r["metric"]),
            number(r.get("ours")),
            number(r.get("baseline")),
            ratio,
            str(r.get("target") or "-"),
            number(r.get("pass")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], header: str, json_path: str | Path | None) -> None:
    """Prints the table of ``rows``; with ``json_path``, also writes them and the header there."""
    print(markdown(rows, header))
    if json_path:
        Path(json_path).write_text(json.dumps({"machine": header, "rows": rows}, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every coreai_torch benchmark.")
    parser.add_argument("--smoke", action="store_true", help="every benchmark once, tiny sizes")
    parser.add_argument("--json", type=Path, help="also write the rows and machine line here")
    parser.add_argument(
        "--only", nargs="+", choices=PARTS, default=PARTS, help="run these parts (default: all)"
    )
    args = parser.parse_args(argv)
    parts = tuple(args.only)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    errors: list[str] = []
    rows = python_rows(args.smoke, errors, parts)
    if CPP_PART in parts:
        rows += cpp_rows(args.smoke, errors)
    header = machine_line(load) + (" (smoke run: sizes are tiny)" if args.smoke else "")
    report(rows, header, args.json)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
