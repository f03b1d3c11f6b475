"""Command line: ``python -m coreai_torch {demo,check,convert}``."""

from __future__ import annotations

import argparse
import sys

from .user_files import UserFileExited, exits_raise

# The module name a checked file runs under: its `if __name__ == "__main__":` block stays out.
_CHECK_RUN_NAME = "__coreai_torch_check__"


def _check_file(target: str, devices: list[str] | None, edge_sizes: bool, debug: bool) -> int:
    """Checks the kernels of a Python file (``FILE[:KERNEL]``) against their references.

    The file defines its kernels (TorchMetalKernel objects at module level) and
    ``EXAMPLES``: kernel name -> :class:`coreai_torch.testing.Example` (or a
    function returning one), the example call each check starts from.
    """
    path, _, wanted = target.partition(":")
    try:
        with exits_raise(path):
            return _check_kernels_of(path, wanted, devices, edge_sizes, debug)
    except UserFileExited as exc:
        print(
            f"check: {exc} before its kernels were all checked, which fails the check (an "
            "unguarded unittest.main() at the top level of a file does that). Put such calls "
            "under `if __name__ == '__main__':`; check runs the file as module "
            f"'{_CHECK_RUN_NAME}'."
        )
        return 1


def _check_kernels_of(
    path: str, wanted: str, devices: list[str] | None, edge_sizes: bool, debug: bool
) -> int:
    import runpy

    from .kernel import TorchMetalKernel
    from .testing import Example, check_kernel

    try:
        namespace = runpy.run_path(path, run_name=_CHECK_RUN_NAME)
    except FileNotFoundError:
        print(f"check: no file {path}")
        return 2
    kernels = {k.name: k for k in namespace.values() if isinstance(k, TorchMetalKernel)}
    if wanted:
        if wanted not in kernels:
            print(f"check: {path} defines no kernel '{wanted}' (it defines: {sorted(kernels)})")
            return 2
        kernels = {wanted: kernels[wanted]}
    if not kernels:
        print(f"check: {path} defines no TorchMetalKernel at module level")
        return 2
    examples = namespace.get("EXAMPLES", {})
    status = 0
    for name, kernel in kernels.items():
        example = examples.get(name)
        if callable(example) and not isinstance(example, Example):
            example = example()
        if not isinstance(example, Example):
            print(
                f"kernel '{name}': NOT CHECKED: {path} gives no example call; add "
                f"EXAMPLES = {{'{name}': Example(*inputs, threads_per_grid=..., "
                "threads_per_thread_group=..., result_shapes=...)}"
            )
            status = 1
            continue
        report = check_kernel(kernel, example, devices=devices, edge_sizes=edge_sizes, debug=debug)
        print(report)
        status |= 0 if report.passed else 1
    return status


def _check() -> int:
    """Runs one tiny kernel on each backend this machine has and says what happened."""
    import time

    import torch

    from . import _C
    from .demo import make_kernels

    print(f"torch {torch.__version__}")
    add = make_kernels()["vector_add"]
    devices = ["cpu"]
    devices += ["cuda"] if torch.cuda.is_available() else []
    devices += ["mps"] if torch.backends.mps.is_available() else []
    status = 0
    for device in devices:
        x = torch.arange(8.0, device=device)
        start = time.perf_counter()
        try:
            out = add(
                x,
                x,
                threads_per_grid=(8, 1, 1),
                threads_per_thread_group=(8, 1, 1),
                result_shapes=[[8]],
            )
            ok = torch.equal(out.cpu(), 2 * x.cpu())
            print(
                f"{device}: kernel ran in {time.perf_counter() - start:.2f} s, "
                f"{'correct' if ok else 'WRONG RESULT'}"
            )
            status |= 0 if ok else 1
        except Exception as exc:  # report every backend, then fail
            print(f"{device}: {type(exc).__name__}: {exc}")
            status = 1
    if "cuda" not in devices:
        libdevice = _C._cuda_libdevice() or "not found"
        print(f"cuda: no CUDA device seen by torch (libdevice for the CUDA backend: {libdevice})")
    if "mps" not in devices:
        print("mps: not available on this machine (the MPS backend needs macOS 26 and Metal 4)")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coreai_torch")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the seed kernels, export and convert them")
    demo.add_argument("--out", help="directory for the .aimodel assets (default: a new temp dir)")
    check = sub.add_parser(
        "check",
        help="without FILE: show which backends this machine has; with FILE[:KERNEL]: check "
        "the file's kernels against torch_defn (docs/cpu.md, 'Checking kernels')",
    )
    check.add_argument("target", nargs="?", metavar="FILE[:KERNEL]")
    check.add_argument("--device", action="append", help="a backend to check on (default: all)")
    check.add_argument("--no-edge-sizes", action="store_true", help="only the example's sizes")
    check.add_argument("--no-debug", action="store_true", help="skip the CPU debug-mode checks")
    sub.add_parser("convert", help="convert a model file to a Core AI asset", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from .demo import main as demo_main

        return demo_main(args.out)
    if args.command == "check":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        if args.target is None:
            return _check()
        return _check_file(args.target, args.device, not args.no_edge_sizes, not args.no_debug)
    from .converter.cli import main as convert_main

    return convert_main(rest)


if __name__ == "__main__":
    sys.exit(main())
