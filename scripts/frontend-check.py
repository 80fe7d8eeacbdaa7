#!/usr/bin/env python3
"""frontend-check.py BUILD_DIR [JOBS]: the compiler's diagnostics for every file of a configured
build, without generating code.

Runs each command of BUILD_DIR/compile_commands.json (the adapter, its libraries, the unit tests
and the fuzz replays when the build has them) with -fsyntax-only in place of -c/-o, JOBS at a
time (default: the number of cores), and fails when any of them prints a diagnostic or fails.
scripts/test.sh uses it for the clang build types other than build-asan/ (Debug, a full build):
clang's -Wall/-Wextra warnings are all issued by its front end, which sees exactly what a full
compile of that build type sees (the same flags, -O level and NDEBUG), so a warning-free front-end
pass is a warning-free build at a third of the cost. gcc is not checked this way: several of its
warnings (-Wmaybe-uninitialized, -Wstringop-overflow, -Wdangling-pointer) come from its
optimisers, so the gcc build types are built whole.
"""
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def syntax_only(entry):
    """The entry's command with -fsyntax-only instead of -c and -o OBJECT."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-o":
            skip = True
        elif arg != "-c":
            out.append(arg)
    return out + ["-fsyntax-only"]


def check(entry):
    """(file, exit status, what the compiler printed)."""
    proc = subprocess.run(syntax_only(entry), cwd=entry["directory"], capture_output=True,
                          text=True, check=False)
    return entry["file"], proc.returncode, proc.stdout + proc.stderr


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: frontend-check.py BUILD_DIR [JOBS]", file=sys.stderr)
        return 2
    path = os.path.join(sys.argv[1], "compile_commands.json")
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        print(f"frontend-check: {path}: {e}", file=sys.stderr)
        return 1
    if not entries:
        print(f"frontend-check: {path} lists no file", file=sys.stderr)
        return 1
    jobs = int(sys.argv[2]) if len(sys.argv) == 3 else os.cpu_count() or 1
    bad = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, status, text in pool.map(check, entries):
            if status != 0 or text.strip():
                bad += 1
                print(f"{name}: exit {status}\n{text}", end="" if text.endswith("\n") else "\n")
    print(f"frontend-check: {len(entries)} files, {bad} with diagnostics")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
