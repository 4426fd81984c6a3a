#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check_static_link.sh ZKLOCK [--openssl]: fails if ZKLOCK (built with ZKR_STATIC_ZKLOCK) needs a
# C++ library or (unless --openssl: zklock-tls) OpenSSL at run time, or sets up iostreams: a dependency added later must not quietly bring
# back the dynamic loader's or the C++ runtime's start-up cost (docs/BENCHMARKS.md, section 7).
needed=$(readelf -d "$1" | grep NEEDED) || { echo "cannot read the dynamic section of $1" >&2; exit 1; }
echo "$needed"
if echo "$needed" | grep -E 'lib(stdc\+\+|gcc_s|fmt|boost|zookeeper)'; then
  echo "$1 needs the shared libraries above; zklock is meant to link them statically (ZKR_STATIC_ZKLOCK)" >&2
  exit 1
fi
# Loading libssl and libcrypto alone costs a start about 3 ms of CPU: TLS is zklock-tls's, which
# zklock runs only when given a TLS option.
if [ "${2:-}" != --openssl ] && echo "$needed" | grep -E 'lib(ssl|crypto)'; then
  echo "$1 needs OpenSSL's libraries above; only zklock-tls may (tools/zklock/CMakeLists.txt)" >&2
  exit 1
fi
# Nor may iostreams come back: their set-up (std::ios_base::Init, the standard streams and their
# locale) runs before main() in every zklock, and zklock prints through stdio and fmt.
symbols=$(nm "$1" 2>/dev/null) || { echo "cannot read the symbols of $1" >&2; exit 1; }
if echo "$symbols" | grep -E ' T _ZNSt8ios_base4InitC[12]Ev$'; then
  echo "$1 sets up iostreams at start (std::ios_base::Init above): some code it links uses <iostream>" >&2
  exit 1
fi
