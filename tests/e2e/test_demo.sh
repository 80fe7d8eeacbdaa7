#!/usr/bin/env bash
# test_demo.sh: the README's first command, `scripts/demo.sh`, run as the README says (no
# arguments: it runs through and stops; --keep, the interactive mode, is not used), with its
# output checked: the discovery list, the bert pods' GPU utilisation and GPU memory percent, their
# inference queue depth per pod and per model, the node's utilisation, each equal to the value
# computed here from the generator's raw data (tests/lib/gen_dcgm.py --vllm, the data the demo
# loads; values are a pure function of its tables), never from the demo's own output. Then: the
# demo exits 0 and leaves nothing running (no process under its temp dir, its ports closed, its
# temp dir gone). The elapsed time is printed, never checked (the README says ~1 min).
# The demo's first step is scripts/setup.sh --demo; in the suite build/ was just built, so it is a
# no-op (the test prints whether build/custom-metrics-adapter changed). CMA_DEMO_NO_SETUP=1 runs
# `scripts/demo.sh --no-setup` instead, for a tree whose build/ must not be rebuilt.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

DEMO_TMP="$CMA_TMP/demo-tmp"
mkdir -p "$DEMO_TMP"
OUT="$CMA_TMP/demo.out"
# demo_pids: pids of processes whose command line names the demo's temp dir (its servers).
demo_pids() {
  local f pid cmd
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    [ "$pid" = $$ ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$f")
    [[ $cmd == *"$DEMO_TMP/"* ]] && echo "$pid"
  done
}
# Whatever the demo left behind is stopped at exit, by pid.
# shellcheck disable=SC2016 # evaluated at exit
cma_on_exit 'for p in $(demo_pids); do kill -KILL "$p" 2>/dev/null; done'

args=()
[ "${CMA_DEMO_NO_SETUP:-0}" = 1 ] && args=(--no-setup)
bin_before=$(stat -c %Y "$(cma_adapter_bin)" 2>/dev/null)
t0=$EPOCHREALTIME
TMPDIR=$DEMO_TMP timeout -k 10 600 scripts/demo.sh "${args[@]}" >"$OUT" 2>&1
rc=$?
elapsed=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
bin_after=$(stat -c %Y "$(cma_adapter_bin)" 2>/dev/null)
printf 'info scripts/demo.sh %s took %.1f s (not checked)\n' "${args[*]}" "$elapsed"
if [ "${#args[@]}" = 0 ]; then
  if [ "$bin_before" = "$bin_after" ]; then
    echo "info the demo's setup step left build/ as it was (no rebuild)"
  else
    echo "info the demo's setup step rebuilt build/ (sources newer than the build)"
  fi
fi
t_eq "demo exits 0" 0 "$rc"
[ "$rc" = 0 ] || sed 's/^/     | /' "$OUT"

# section CAPTION: the output lines the demo printed under "== CAPTION", without the command line.
section() {
  awk -v h="== $1" '$0 == h { f = 1; next } /^== / { f = 0 } f && !/^\$ / && NF' "$OUT"
}

# Expected values from the raw generated data.
gen_dcgm --vllm || exit 1
EXP="$DCGM_DIR/expected.json"
bert='.labels.namespace == "ml" and (.labels.pod // "" | startswith("bert-"))'
want_util=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod "$bert" | awk '{printf "{\"pod\":\"%s\",\"value\":\"%s\"}\n", $1, $2}')
want_mem=$(jq -r "$CMA_JQ_QUANTITY"'[.series[] | select('"$bert"')] as $s
  | [$s[] | .labels.pod] | unique[] | . as $p
  | ([$s[] | select(.name == "DCGM_FI_DEV_FB_USED" and .labels.pod == $p) | .value] | add) as $used
  | ([$s[] | select(.name == "DCGM_FI_DEV_FB_FREE" and .labels.pod == $p) | .value] | add) as $free
  | "{\"pod\":\"\($p)\",\"value\":\"\(100 * $used / ($used + $free) | quantity)\"}"' "$EXP")
want_queue=$(jq -r "$CMA_JQ_QUANTITY"'.vllm[] | select(.name == "vllm:num_requests_waiting")
  | "{\"pod\":\"\(.labels.pod)\",\"value\":\"\(.value | quantity)\"}"' "$EXP" | sort)
want_model=$(jq -r "$CMA_JQ_QUANTITY"'[.vllm[] | select(.name == "vllm:num_requests_waiting" and .labels.model_name == "bert-intent") | .value]
  | "{\"model\":\"bert-intent\",\"value\":\"\(add | quantity)\"}"' "$EXP")
want_node=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg Hostname '.labels.Hostname == "gpu-node-2"' |
  awk '{printf "{\"node\":\"%s\",\"value\":\"%s\"}\n", $1, $2}')
t_ok "raw data: the bert pods queue something (a check of 0 against 0 could not fail)" \
  test "$want_model" != '{"model":"bert-intent","value":"0"}'

disc=$(section "The metrics an HPA can use (discovery)")
for m in pods/gpu_utilization_percent pods/gpu_memory_used_percent pods/gpu_memory_used_bytes \
  nodes/gpu_utilization_percent pods/inference_requests_waiting pods/inference_kv_cache_usage_percent; do
  t_ok "demo: discovery shows $m" grep -qx "$m" <<<"$disc"
done
t_eq "demo: GPU utilisation of the bert pods" "$want_util" \
  "$(section "GPU utilisation of the bert pods (an HPA's Pods metric: mean over each pod's GPUs)" | sort)"
t_eq "demo: GPU memory percent of the bert pods" "$want_mem" \
  "$(section "GPU memory of the same pods, percent of their cards" | sort)"
t_eq "demo: inference queue depth of the bert pods (vLLM requests waiting)" "$want_queue" \
  "$(section "Inference queue depth of the same pods (vLLM requests waiting): the LLM-serving signal" | sort)"
t_eq "demo: queue depth per model (external, model_name=bert-intent)" "$want_model" \
  "$(section "... and per model (external.metrics.k8s.io, model_name)")"
t_eq "demo: GPU utilisation of gpu-node-2" "$want_node" \
  "$(section "GPU utilisation per node (mean over all GPUs of the node, idle ones included)")"
# shellcheck disable=SC2016 # bash -c scripts
t_ok "demo: no command failed" bash -c '! grep -q "(the command failed" "$1"' _ "$OUT"
t_ok "demo: the adapter stopped cleanly" grep -q "adapter exited with status 0" "$OUT"

# Cleanup: nothing of the demo's is left running or listening, its temp dir is gone.
t_eq "demo: no process left under its temp dir" "" "$(demo_pids | paste -sd' ')"
urls=$(grep -Eo 'https?://127\.0\.0\.1:[0-9]+' "$OUT" | sort -u)
t_eq "demo: it printed its three servers' URLs (Prometheus, fake kube-apiserver, adapter)" 3 "$(wc -w <<<"$urls")"
for url in $urls; do
  # shellcheck disable=SC2016 # bash -c script
  t_ok "demo: $url is closed after the demo" bash -c '! curl -sk --max-time 5 -o /dev/null "$1"' _ "$url"
done
t_eq "demo: its temp dir was removed" "" "$(find "$DEMO_TMP" -mindepth 1 -maxdepth 1 2>/dev/null)"
t_summary
