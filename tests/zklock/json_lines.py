#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that FILE (or stdin, with -) is JSON lines - one object a line, nothing else - and prints
one line per record: its "event", then key=value for each field named on the command line that the
record has (values as JSON). Exits 1, naming the line, on anything that is not one JSON object."""
import json
import sys

source = sys.stdin if sys.argv[1] == "-" else open(sys.argv[1], encoding="utf-8")
fields = sys.argv[2:]
for number, line in enumerate(source, 1):
    try:
        record = json.loads(line)
    except ValueError as error:
        print(f"line {number} is not JSON ({error}): {line!r}")
        sys.exit(1)
    if not isinstance(record, dict) or "event" not in record or "time" not in record:
        print(f"line {number} is not an object with an event and a time: {line!r}")
        sys.exit(1)
    shown = " ".join(f"{name}={json.dumps(record[name])}" for name in fields if name in record)
    print(f"{record['event']} {shown}".rstrip())
