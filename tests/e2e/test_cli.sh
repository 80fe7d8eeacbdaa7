#!/usr/bin/env bash
# test_cli.sh: the command line: --help and --version, unknown flags and bad flag values (exit 2), --check-config on every shipped config, a missing --config with prometheus-adapter's wording, and start-up errors in a config (bad regex, bad template, two groups without `as`) as exit 1 with `file:line:column: message`, exactly as tests/config-errors/<case>/expect.error says.
# asan: yes
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
# run_cli ARGS...: runs the adapter; sets OUT (stdout), ERR (stderr) and RC.
run_cli() {
  "$bin" "$@" >"$CMA_TMP/cli.out" 2>"$CMA_TMP/cli.err"
  RC=$?
  OUT=$(cat "$CMA_TMP/cli.out")
  ERR=$(cat "$CMA_TMP/cli.err")
}

# --- help and version ----------------------------------------------------------------------------
run_cli --help
t_eq "--help exits 0" 0 "$RC"
t_ok "--help starts with a usage line" grep -q '^Usage: custom-metrics-adapter' <<<"$OUT"
for f in --config --prometheus-url --prometheus-verb --prometheus-header --prometheus-token-file \
  --prometheus-ca-file --prometheus-timeout --metrics-relist-interval --metrics-max-age --secure-port \
  --cert-dir --tls-cert-file --tls-private-key-file --lister-kubeconfig --v --version --check-config; do
  t_ok "--help lists $f" grep -qE -- "(^|[ ,])$f( |=|$)" <<<"$OUT"
done
t_ok "--help shows prometheus-adapter's defaults (relist 10m, timeout 10s)" \
  bash -c 'grep -- "--metrics-relist-interval" <<<"$1" | grep -q "10m" && grep -- "--prometheus-timeout" <<<"$1" | grep -q "10s"' _ "$OUT"
help_text=$OUT
run_cli -h
t_eq "-h exits 0" 0 "$RC"
t_eq "-h prints the --help text" "$help_text" "$OUT"
run_cli --version
t_eq "--version exits 0" 0 "$RC"
t_ok "--version prints name and version" grep -qE '^custom-metrics-adapter v[0-9]+\.[0-9]+\.[0-9]+' <<<"$OUT"

# --- flag errors ---------------------------------------------------------------------------------
run_cli --no-such-flag --config=config/gpu-dcgm.yaml
t_eq "unknown flag exits 2" 2 "$RC"
t_ok "unknown flag: 'unknown flag: --no-such-flag'" grep -q 'unknown flag: --no-such-flag' <<<"$ERR"
t_eq "unknown flag: nothing on stdout" "" "$OUT"
run_cli --metrics-relist-interval=soon --config=config/gpu-dcgm.yaml
t_eq "a bad duration exits 2" 2 "$RC"
t_ok "a bad duration: the message names the flag" grep -q -- '--metrics-relist-interval' <<<"$ERR"
run_cli --prometheus-verb=PUT --config=config/gpu-dcgm.yaml --check-config
t_eq "--prometheus-verb=PUT exits non-zero" 1 "$((RC != 0))"
t_ok "--prometheus-verb=PUT: prometheus-adapter's wording" \
  grep -qF 'unsupported Prometheus HTTP verb "PUT"; supported verbs: "GET" and "POST"' <<<"$ERR"
run_cli --config
t_eq "--config without a value exits 2" 2 "$RC"

# --- config files --------------------------------------------------------------------------------
for cfg in config/*.yaml; do
  run_cli --config="$cfg" --check-config
  t_eq "--check-config $cfg exits 0" 0 "$RC"
  t_ok "--check-config $cfg says OK" grep -q "^$cfg: OK" <<<"$OUT"
done
run_cli --check-config
t_eq "no --config: exits non-zero" 1 "$((RC != 0))"
t_ok "no --config: prometheus-adapter's wording" \
  grep -qF 'no metrics discovery configuration file specified (make sure to use --config)' <<<"$ERR"
run_cli --config="$CMA_TMP/missing.yaml" --check-config
t_eq "a missing config file exits 1" 1 "$RC"
t_ok "a missing config file: the message names it" grep -qF "$CMA_TMP/missing.yaml" <<<"$ERR"
run_cli --config=config/gpu-dcgm.yaml --metrics-relist-interval=10m --metrics-max-age=1m --check-config
t_eq "--metrics-max-age below the relist interval exits 1" 1 "$RC"
t_ok "... with prometheus-adapter's wording" grep -qF 'max age must not be less than relist interval' <<<"$ERR"

# The three start-up errors of the brief; each is also a tests/config-errors case.
for case in bad-regex bad-template two-groups-without-as; do
  dir=tests/config-errors/$case
  if [ ! -f "$dir/config.yaml" ] || [ ! -f "$dir/expect.error" ]; then
    t_fail "config error $case: $dir/config.yaml and expect.error exist"
    continue
  fi
  (cd tests/config-errors && "$bin" --config="$case/config.yaml" --check-config >"$CMA_TMP/cli.out" 2>"$CMA_TMP/cli.err")
  RC=$?
  line=$(grep -F "$case/config.yaml:" "$CMA_TMP/cli.err" | head -n 1 | sed 's/^.* E //')
  t_eq "config error $case: exit 1" 1 "$RC"
  t_ok "config error $case: file:line:column: message" grep -qE "^$case/config.yaml:[0-9]+:[0-9]+: .+" <<<"$line"
  t_eq "config error $case: the message of expect.error" "$(cat "$dir/expect.error")" "$line"
  t_eq "config error $case: nothing on stdout" "" "$(cat "$CMA_TMP/cli.out")"
  # Without --check-config, start-up stops the same way before serving anything.
  (cd tests/config-errors && timeout 30 "$bin" --config="$case/config.yaml" --secure-port=0 \
    --bind-address=127.0.0.1 --cert-dir="$CMA_TMP/certs" >/dev/null 2>"$CMA_TMP/cli.err")
  t_eq "config error $case: start-up exits 1 too" 1 "$?"
  t_ok "config error $case: start-up logs the same line" grep -qF "$(cat "$dir/expect.error")" "$CMA_TMP/cli.err"
done

t_summary
