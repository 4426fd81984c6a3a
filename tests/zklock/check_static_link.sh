#!/bin/sh
# check_static_link.sh ZKLOCK: fails if ZKLOCK (built with ZKR_STATIC_ZKLOCK) needs a C++ library
# at run time: a dependency added later must not quietly bring back the dynamic loader's start-up
# cost (docs/BENCHMARKS.md, section 7).
needed=$(readelf -d "$1" | grep NEEDED) || { echo "cannot read the dynamic section of $1" >&2; exit 1; }
echo "$needed"
if echo "$needed" | grep -E 'lib(stdc\+\+|gcc_s|fmt|boost|zookeeper)'; then
  echo "$1 needs the shared libraries above; zklock is meant to link them statically (ZKR_STATIC_ZKLOCK)" >&2
  exit 1
fi
