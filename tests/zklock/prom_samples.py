#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Parses FILE with prometheus_client's text parser (the format node_exporter's textfile collector
reads) and prints one line per sample: name{label="value",...} value. Exits 1 if it does not parse."""
import sys

from prometheus_client.parser import text_string_to_metric_families

try:
    with open(sys.argv[1], encoding="utf-8") as source:
        families = list(text_string_to_metric_families(source.read()))
except Exception as error:  # the parser raises ValueError and others on bad input
    print(f"does not parse: {error!r}")
    sys.exit(1)
for family in families:
    for sample in family.samples:
        labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
        print(f"{family.type} {sample.name}{{{labels}}} {sample.value:g}")
