#!/usr/bin/env bash
# lib_floor.sh: the memory floor that the adapter's shared libraries set (docs/benchmarks.md,
# "The library floor"). Builds bench/lib_floor.c with several link lines and runs each RUNS times
# (default 5), printing the median VmRSS / RssAnon / RssFile (MiB) per stage as a Markdown table:
#   libc only                        nothing but the C library
#   libcurl (OpenSSL build)          -lcurl: Debian's libcurl4 and its dependency tree
#   libcurl (GnuTLS build)           libcurl-gnutls.so.4 (package libcurl3-gnutls), when installed
#   the adapter's libraries          the same DT_NEEDED set as build/custom-metrics-adapter
# Each curl variant is measured at "loaded" and after curl_global_init(). No server, no threads,
# no data: whatever these show, the adapter cannot go below. Usage: bench/lib_floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
out=$(mktemp -d "${TMPDIR:-/tmp}/lib_floor.XXXXXX")
trap 'rm -rf "$out"' EXIT
src=bench/lib_floor.c
cflags=(-std=c17 -O2 -Wall -Wextra)
libdir=$(dirname "$(cc -print-file-name=libc.so.6)")
gnutls_curl=""
for d in "$libdir" /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu; do
  [ -e "$d/libcurl-gnutls.so.4" ] && gnutls_curl="$d/libcurl-gnutls.so.4" && break
done

# The adapter's own link set, in the order its binary names them (pkg-config names as CMake uses).
adapter_libs=$(pkg-config --libs libmicrohttpd gnutls libpcre2-8 yaml-0.1 libcurl yajl libcrypto jansson)

cc "${cflags[@]}" "$src" -o "$out/libc"
# shellcheck disable=SC2046 # word splitting of the pkg-config output is wanted
cc "${cflags[@]}" -DWITH_CURL "$src" -o "$out/curl-openssl" -Wl,--no-as-needed $(pkg-config --libs libcurl)
# shellcheck disable=SC2086 # word splitting of the pkg-config output is wanted
cc "${cflags[@]}" -DWITH_CURL "$src" -o "$out/adapter-set" -Wl,--no-as-needed $adapter_libs -lm
if [ -n "$gnutls_curl" ]; then
  cc "${cflags[@]}" -DWITH_CURL "$src" -o "$out/curl-gnutls" -Wl,--no-as-needed "$gnutls_curl"
fi

median() { sort -n | awk '{a[NR]=$1} END {m=(NR+1)/2; print (NR%2 ? a[m] : (a[NR/2]+a[NR/2+1])/2)}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k/1024}'; }

echo "| link set | stage | VmRSS (MiB) | anonymous | file-backed | libraries mapped |"
echo "| --- | --- | --- | --- | --- | --- |"
for v in libc curl-openssl curl-gnutls adapter-set; do
  [ -x "$out/$v" ] || {
    echo "| $v | not built (libcurl3-gnutls not installed) | | | | |"
    continue
  }
  for _ in $(seq "$RUNS"); do "$out/$v"; done >"$out/$v.txt"
  nlib=$(ldd "$out/$v" | grep -c '=>' || true)
  case $v in
    libc) label="libc only" ;;
    curl-openssl) label="libcurl (OpenSSL build, Debian libcurl4)" ;;
    curl-gnutls) label="libcurl (GnuTLS build, Debian libcurl3-gnutls)" ;;
    adapter-set) label="the adapter's libraries (its DT_NEEDED set)" ;;
  esac
  for stage in loaded curl_global_init; do
    grep -q "^$stage " "$out/$v.txt" || continue
    r=$(awk -v s="$stage" '$1 == s {print $2}' "$out/$v.txt" | median)
    a=$(awk -v s="$stage" '$1 == s {print $3}' "$out/$v.txt" | median)
    f=$(awk -v s="$stage" '$1 == s {print $4}' "$out/$v.txt" | median)
    echo "| $label | $stage | $(mib "$r") | $(mib "$a") | $(mib "$f") | $nlib |"
  done
done
echo
echo "Medians of $RUNS runs; $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg)."
