# shellcheck shell=bash
# tests/cases/lib.sh: what the case runner (tests/e2e/test_cases.sh) and the recorder
# (tests/cases/record.sh) share: finding cases, the fake kube-apiserver per pods file, starting the
# adapter for one case and sending the case's request. Sourced after tests/lib/common.sh; the
# format of a case directory is in tests/cases/README.md.

CASES_DIR="$CMA_ROOT/tests/cases"

# case_list [NAME...]: the case directories (absolute), all of them when no NAME is given; a NAME
# may also be a path to the directory. Prints nothing and returns 1 for an unknown name.
case_list() {
  local d n
  if [ $# -eq 0 ]; then
    for d in "$CASES_DIR"/*/; do
      [ -f "$d/request" ] && printf '%s\n' "${d%/}"
    done
    return 0
  fi
  for n in "$@"; do
    n=${n%/}
    n=${n##*/}
    if [ ! -f "$CASES_DIR/$n/request" ]; then
      cma_log "no case $n (no $CASES_DIR/$n/request)"
      return 1
    fi
    printf '%s\n' "$CASES_DIR/$n"
  done
}

declare -A _case_kubeconfigs=()
# case_use_kube DIR: points KUBE_KUBECONFIG at a fake kube-apiserver replaying the recorded
# fixtures plus DIR/pods.json (when present); one fake serves every case with the same pods file.
case_use_kube() {
  local pods="$1/pods.json" key
  key=none
  [ -f "$pods" ] && key=$(sha256sum "$pods" | cut -c1-16)
  if [ -z "${_case_kubeconfigs[$key]:-}" ]; then
    if [ "$key" = none ]; then
      start_fake_kube || return 1
    else
      start_fake_kube "$pods" || return 1
    fi
    _case_kubeconfigs[$key]=$KUBE_KUBECONFIG
  fi
  export KUBE_KUBECONFIG=${_case_kubeconfigs[$key]}
}

# case_start_adapter DIR BACKEND_URL: starts the adapter with DIR/rules.yaml and DIR/flags (one
# flag a line, # comments allowed) against BACKEND_URL, relisting only at start, and waits until
# /readyz answers 200 (the first relist has finished).
case_start_adapter() {
  local dir=$1 flags=() line
  if [ -f "$dir/flags" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      case $line in '' | '#'*) continue ;; esac
      flags+=("$line")
    done <"$dir/flags"
  fi
  PROM_URL=$2 RELIST=1h start_adapter "$dir/rules.yaml" "${flags[@]}" || return 1
  wait_status /readyz 200 60 >/dev/null
}

# case_send DIR OUT_PREFIX: sends DIR/request to the adapter: the first line is "METHOD
# PATH?QUERY", header lines follow up to an empty line, the rest is the body. Writes
# OUT_PREFIX.status, OUT_PREFIX.ctype and OUT_PREFIX.body.
case_send() {
  local dir=$1 out=$2 method target args=() line in_body=0 body_file="$2.request-body"
  : >"$body_file"
  {
    read -r method target
    while IFS= read -r line; do
      line=${line%$'\r'}
      if [ "$in_body" = 1 ]; then
        printf '%s\n' "$line" >>"$body_file"
      elif [ -z "$line" ]; then
        in_body=1
      else
        args+=(-H "$line")
      fi
    done
  } <"$dir/request"
  [ -s "$body_file" ] && args+=(--data-binary "@$body_file")
  curl -s -g --max-time 60 --cacert "$ADAPTER_CA" -X "$method" "${args[@]}" -D "$out.headers" \
    -o "$out.body" -w '%{http_code}' "$ADAPTER_URL$target" >"$out.status"
  sed -n 's/^[Cc]ontent-[Tt]ype: *\([^\r]*\)\r*$/\1/p' "$out.headers" | tail -n 1 >"$out.ctype"
}
