#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reads a Prometheus text exposition on stdin with python3-prometheus-client's parser, a reading
of the format independent of the library's writer, and prints what it understood:
    family NAME TYPE
    sample NAME LABEL=HEX,... VALUE      (label values as hex of their UTF-8 bytes, sorted by name)
It exits 1, printing "unreadable: ...", when the text is not valid UTF-8 or does not parse."""
import sys

from prometheus_client.parser import text_string_to_metric_families

try:
    text = sys.stdin.buffer.read().decode("utf-8")
    for family in text_string_to_metric_families(text):
        print(f"family {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f"{k}={v.encode('utf-8').hex()}" for k, v in sorted(sample.labels.items()))
            print(f"sample {sample.name} {labels} {sample.value!r}")
except Exception as error:  # any failure to read is the finding
    print(f"unreadable: {type(error).__name__}: {error}")
    sys.exit(1)
