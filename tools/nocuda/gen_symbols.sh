#!/bin/sh
# Print the driver entry points the installed Legate / cuPyNumeric wheels need from libcuda.so.1,
# one per line: link-time imports of every library that NEEDs libcuda.so.1, plus the names
# Realm and Legate look up at run time (dlsym / cuGetProcAddress).
# Usage: tools/nocuda/gen_symbols.sh <site-packages>
set -eu
sp=${1:?usage: gen_symbols.sh <site-packages>}
{
  find "$sp/legate" "$sp/cupynumeric" -name '*.so*' -type f | while read -r f; do
    if readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*\[libcuda\.so\.1\]'; then
      nm -D --undefined-only "$f" | awk '{print $NF}' | sed 's/@.*//'
    fi
  done | grep -E '^cu[A-Z]' | grep -v '^cuFile'   # cuFile* come from libcufile, not libcuda
  strings "$sp/legate/lib64/librealm-legate.so" |
    sed -n 's/^Could not retrieve symbol \(cu[A-Za-z0-9_]*\)$/\1/p'
  strings "$sp/legate/lib64/liblegate.so" | grep -E '^cu[A-Z][A-Za-z0-9_]*$' | grep -v '^cuFile'
  # cuGetProcAddress(_v2) deliberately excluded: see nocuda.c
} | grep -v '^cuGetProcAddress' | sort -u
