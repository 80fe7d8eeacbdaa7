# shellcheck shell=bash
# exporters.sh: real exporter output (../shared/fixtures/exporters) served on loopback and scraped
# by a real Prometheus, with honor_labels true or false (tests/lib/fixture_scrape.py says what
# stands in for the cluster). Source it after tests/lib/common.sh.
#
#   prepare_fixtures [DIR...]         FIX_DIR: serve/ tree, targets.json, pods.json, stored.om; the
#                                     DIRs (gen_dcgm.py --exposition's synthetic exporters/) are
#                                     served next to the real fixtures
#   start_fixture_server              a plain HTTP server over $FIX_DIR/serve (FIX_HTTP_PORT)
#   start_fixture_prometheus HONOR [RULES_FILE]
#                                     Prometheus scraping every target every second (recording
#                                     rules of RULES_FILE every second), on a TSDB backfilled with
#                                     stored.om; waits until every target has been scraped.
#                                     Exports PROM_URL, PROM_PID, PROM_DIR, PROM_LOG.

CMA_EXPORTER_FIXTURES=${CMA_EXPORTER_FIXTURES:-$(cd "$CMA_ROOT/.." && pwd)/shared/fixtures/exporters}
export CMA_EXPORTER_FIXTURES

prepare_fixtures() {
  FIX_DIR="$CMA_TMP/fixtures"
  python3 "$CMA_LIB/fixture_scrape.py" prepare "$FIX_DIR" "$CMA_EXPORTER_FIXTURES" "$@" || return 1
  export FIX_DIR
}

start_fixture_server() {
  local attempt port rc
  for attempt in 1 2 3; do
    port=$(free_port)
    _cma_spawn "$FIX_DIR/http.log" python3 -m http.server --bind 127.0.0.1 --directory "$FIX_DIR/serve" "$port"
    _cma_wait_ready fixture-server "$_CMA_SPAWNED" "$FIX_DIR/http.log" "http://127.0.0.1:$port/"
    rc=$?
    if [ $rc -eq 0 ]; then
      export FIX_HTTP_PORT=$port FIX_HTTP_PID=$_CMA_SPAWNED
      return 0
    fi
    [ $rc -eq 2 ] || return 1
    cma_log "start_fixture_server: port $port was taken (attempt $attempt), retrying"
  done
  return 1
}

start_fixture_prometheus() {
  local honor=$1 rules=${2:-} dir port attempt rc deadline n
  dir=$(mktemp -d "$CMA_TMP/prometheus-honor-$honor.XXXX")
  python3 "$CMA_LIB/fixture_scrape.py" config "$FIX_DIR" "$FIX_HTTP_PORT" "$honor" >"$dir/prometheus.yml" || return 1
  if [ -n "$rules" ]; then
    printf 'rule_files:\n- "%s"\n' "$(realpath "$rules")" >>"$dir/prometheus.yml"
  fi
  if ! promtool tsdb create-blocks-from openmetrics "$FIX_DIR/stored.om" "$dir/data" >"$dir/promtool.log" 2>&1; then
    cma_log "start_fixture_prometheus: promtool failed:"
    tail -n 20 "$dir/promtool.log" >&2
    return 1
  fi
  PROM_LOG="$dir/prometheus.log"
  for attempt in 1 2 3; do
    port=$(free_port)
    _cma_spawn "$PROM_LOG" prometheus --config.file="$dir/prometheus.yml" \
      --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=30d \
      --web.listen-address="127.0.0.1:$port" --log.level=warn
    _cma_wait_ready prometheus "$_CMA_SPAWNED" "$PROM_LOG" "http://127.0.0.1:$port/-/ready"
    rc=$?
    [ $rc -eq 0 ] && break
    [ $rc -eq 2 ] || return 1
    cma_log "start_fixture_prometheus: port $port was taken (attempt $attempt), retrying"
  done
  [ $rc -eq 0 ] || return 1
  export PROM_URL="http://127.0.0.1:$port" PROM_PID=$_CMA_SPAWNED PROM_DIR=$dir PROM_LOG
  n=$(jq length "$FIX_DIR/targets.json")
  deadline=$((SECONDS + $(_cma_start_timeout)))
  # every target up: one `up` series per target with value 1
  until [ "$(prom_query 'count(up == 1)' | jq -r '.data.result[0].value[1] // 0')" = "$n" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      cma_log "start_fixture_prometheus: not all $n targets were scraped:"
      curl -s "$PROM_URL/api/v1/targets" | jq -c '.data.activeTargets[] | [.scrapeUrl, .health, .lastError]' >&2
      return 1
    fi
    sleep 0.5
  done
}
