#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every source file of the repository says its licence in one line near its top (LICENSE).

    check_licence_headers.py SOURCE_DIR

Source files: C, C++, Java, Python, shell, CMake, SQL and Promela files, the templates CMake
configures (*.in: the package's CMake and pkg-config files, the Doxyfile), the bash completion,
and the executable scripts without a suffix (a first line starting with #!). Exit status 1 names
each file without the line.
"""
import subprocess
import sys
from pathlib import Path

TAG = "SPDX-License-Identifier: Apache-2.0"
SUFFIXES = {".c", ".cpp", ".hpp", ".h", ".java", ".py", ".sh", ".cmake", ".sql", ".pml", ".in", ".bash-completion"}


def is_source(root, name):
    path = Path(name)
    if name.startswith("tests/fuzz/corpus/"):
        return False  # inputs of the fuzzers, not code
    if path.suffix in SUFFIXES or path.name == "CMakeLists.txt":
        return True
    if path.suffix == "" and (root / name).is_file():
        with open(root / name, "rb") as file:
            return file.read(2) == b"#!"
    return False


def main():
    root = Path(sys.argv[1])
    listed = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"check_licence_headers: {root} is not a git work tree: {listed.stderr.strip()}")
        return 1
    missing = []
    for name in listed.stdout.split("\n"):
        if name and is_source(root, name):
            head = (root / name).read_text(errors="replace").split("\n")[:3]
            if not any(TAG in line for line in head):
                missing.append(name)
    for name in missing:
        print(f"{name}: no '{TAG}' line in its first three lines")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
