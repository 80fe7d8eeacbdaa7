#!/usr/bin/env bash
# envelope.sh: issue 12's performance envelope in one run, on one binary, one after the other so
# no two measurements share the machine: bench/run.sh (RSS idle, at 100k and 1M series; discovery
# throughput over TLS keep-alive; by-selector latency at 10, 100 and 1,000 pods against the same
# PromQL sent straight to Prometheus, HTTPS and authorization included), bench/connections.sh
# (RSS with 1,000 keep-alive TLS connections, by mapping) and bench/fleet.sh (10,000 HPAs for
# 60 s). The load average is recorded between the parts. Outputs: docs/benchmarks.md's generated
# "Figures" (run.sh), and bench/.cache/envelope-last/{connections,fleet}.md with the load log,
# which are pasted into docs/benchmarks.md by hand with the interpretation. Figures only.
#
# Usage: bench/envelope.sh   (about 35 minutes on 2 cores; run.sh's knobs apply)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=bench/.cache/envelope-last
rm -rf "$OUT"
mkdir -p "$OUT"
load() { printf '%s %s load %s\n' "$(date -u +%H:%M:%S)" "$1" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.log"; }

load "start"
bench/run.sh 2>&1 | tee "$OUT/run.log"
load "after run.sh"
export CMA_BIN=${CMA_BIN:-build-bench/custom-metrics-adapter}
RUNS=${RUNS:-3} HEADER_BYTES=${HEADER_BYTES:-16384 4096} bench/connections.sh >"$OUT/connections.md" \
  2>"$OUT/connections.log"
load "after connections.sh"
bench/fleet.sh >"$OUT/fleet.md" 2>"$OUT/fleet.log"
load "after fleet.sh"
cat "$OUT/load.log"
