#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the API reference (docs/api/Doxyfile.in) and fails on any Doxygen warning: an undocumented
# public name, a broken reference, markup Doxygen cannot read. Each warning names the header's line.
#   check_api_reference.sh DOXYGEN OUTPUT_DIR   (OUTPUT_DIR holds the configured Doxyfile)
set -eu
doxygen=$1 out=$2
rm -rf "$out/html" "$out/warnings.log"
status=0
"$doxygen" "$out/Doxyfile" || status=$?
if [ -s "$out/warnings.log" ]; then
  sort -u "$out/warnings.log" >&2
  echo "docs_api_reference: $(sort -u "$out/warnings.log" | wc -l) Doxygen warnings (each is an error)" >&2
  exit 1
fi
[ "$status" -eq 0 ] || { echo "docs_api_reference: doxygen exited with status $status" >&2; exit 1; }
[ -s "$out/html/index.html" ] || { echo "docs_api_reference: no $out/html/index.html" >&2; exit 1; }
echo "docs_api_reference: $(find "$out/html" -name 'classzkr_1_1*.html' ! -name '*-members.html' | wc -l) classes documented, no warnings"
