#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The project's version where a doc spells it out: the man page's title line and the Debian
package's file name in docs/operations.md.

    check_versions.py SOURCE_DIR VERSION

VERSION is the project's (CMakeLists.txt's project(... VERSION ...)). Exit status 1 names each
place that says another.
"""
import re
import sys
from pathlib import Path


def main():
    root, version = Path(sys.argv[1]), sys.argv[2]
    problems = []
    man = "tools/zklock/zklock.1"
    title = (root / man).read_text().split("\n")[0]
    said = re.search(r'"zkrecipes ([^"]*)"', title)
    if not title.startswith(".TH ") or not said:
        problems.append(f"{man}:1: no \"zkrecipes VERSION\" in the title line: {title}")
    elif said.group(1) != version:
        problems.append(f"{man}:1: says zkrecipes {said.group(1)}, the project is {version}")
    doc = "docs/operations.md"
    for number, line in enumerate((root / doc).read_text().split("\n"), 1):
        for package in re.findall(r"zkrecipes_([0-9][^_]*)_", line):
            if package != version:
                problems.append(f"{doc}:{number}: names the package of {package}, the project is {version}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
