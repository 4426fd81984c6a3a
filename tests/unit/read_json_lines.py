#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reads JSON lines (the library's json_lines_log_sink) from the file named by argv[1] with
Python's json module and prints, per line, its keys and values:
    record KEY=HEX,...     (sorted by key; values as hex of their UTF-8 bytes)
It exits 1, printing "unreadable: ...", when a line is not valid UTF-8 or not one JSON object."""
import json
import sys

try:
    with open(sys.argv[1], "rb") as lines:
        for number, raw in enumerate(lines, 1):
            record = json.loads(raw.decode("utf-8"))
            if not isinstance(record, dict) or not raw.endswith(b"\n"):
                raise ValueError(f"line {number} is not one JSON object on its own line")
            print("record " + ",".join(f"{k}={str(v).encode('utf-8').hex()}" for k, v in sorted(record.items())))
except Exception as error:  # any failure to read is the finding
    print(f"unreadable: {type(error).__name__}: {error}")
    sys.exit(1)
