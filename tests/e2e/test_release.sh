#!/usr/bin/env bash
# test_release.sh: release hygiene (issue 24 part 6), with the built binary and the pinned helm:
# one version everywhere (CMakeLists.txt's project VERSION = `--version` = the chart's appVersion =
# the image tag the chart and deploy/base run = the Artifact Hub image annotation), `--version`
# carries the source revision (the checkout's `git rev-parse --short=12 HEAD` when the binary was
# configured from this checkout, else what CMA_REVISION says), CHANGELOG.md has a section for the
# version, and Chart.yaml's Artifact Hub annotations parse (images, license, links).
# asan: no
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

bin=$(cma_adapter_bin)
tmp=$(cma_tmp)
chart=deploy/helm/custom-metrics-adapter
cmake_version=$(sed -n 's/^project(custom-metrics-adapter VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
t_ok "CMakeLists.txt has a project version ($cmake_version)" grep -qE '^[0-9]+\.[0-9]+\.[0-9]+$' <<<"$cmake_version"
out=$("$bin" --version)
t_ok "--version: custom-metrics-adapter v<version> (revision <rev>)" \
  grep -qE '^custom-metrics-adapter v[0-9]+\.[0-9]+\.[0-9]+ \(revision [A-Za-z0-9._+-]+\)$' <<<"$out"
t_eq "--version's version is CMakeLists.txt's" "$cmake_version" "$(sed -n 's/^custom-metrics-adapter v\([^ ]*\) .*/\1/p' <<<"$out")"
rev=$(sed -n 's/.*(revision \(.*\))$/\1/p' <<<"$out")
# the revision the build directory was configured with (CMakeCache: CMA_REVISION given, else git's)
cache="$(dirname "$bin")/CMakeCache.txt"
given=$(sed -n 's/^CMA_REVISION:STRING=//p' "$cache" 2>/dev/null)
if [ -n "$given" ]; then
  t_eq "--version's revision is the CMA_REVISION the build was given" "$given" "$rev"
else
  t_ok "--version's revision is a commit of this repository ($rev)" git cat-file -e "$rev^{commit}"
fi
# a build configured with -DCMA_REVISION prints it (configure only: the value reaches the compile definition)
cmake -S . -B "$tmp/rev-build" -DCMA_BUILD_TESTS=OFF -DCMA_REVISION=abc123def456 >"$tmp/cmake.log" 2>&1
t_ok "cmake -DCMA_REVISION=abc123def456: the configure step reports it" grep -q "revision abc123def456" "$tmp/cmake.log"
t_ok "... and passes it to the compiler as CMA_REVISION" \
  grep -qE 'CMA_REVISION=[\\"]+abc123def456[\\"]+ ' "$tmp/rev-build/compile_commands.json"
cmake -S . -B "$tmp/rev-bad" -DCMA_BUILD_TESTS=OFF '-DCMA_REVISION=a b' >"$tmp/cmake-bad.log" 2>&1
t_eq "a revision with a space is refused at configure time" 1 $?

chart_json=$(python3 -c 'import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' "$chart/Chart.yaml")
app=$(jq -r .appVersion <<<"$chart_json")
t_eq "Chart.yaml appVersion is the adapter's version" "$cmake_version" "$app"
if tools=$("$CMA_ROOT/scripts/tools.sh"); then
  export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"
  img=$("$tools/helm" template r "$chart" | sed -n 's/^ *image: "\(.*\)"$/\1/p' | sort -u)
  t_eq "the chart runs custom-metrics-adapter:<appVersion> (Deployment and test hook)" "custom-metrics-adapter:$app" "$img"
else
  t_fail "scripts/tools.sh installs the pinned helm"
fi
t_eq "deploy/base runs the same image" "custom-metrics-adapter:$app" \
  "$(sed -n 's/^ *image: *\(custom-metrics-adapter:[^ ]*\).*/\1/p' deploy/base/deployment.yaml)"
t_eq "Artifact Hub images annotation: the same image" "custom-metrics-adapter:$app" \
  "$(jq -r '.annotations["artifacthub.io/images"]' <<<"$chart_json" | python3 -c 'import sys,yaml; print(yaml.safe_load(sys.stdin)[0]["image"])')"
t_json "Artifact Hub license annotation" "$chart_json" '.annotations["artifacthub.io/license"]' "Apache-2.0"
t_ok "LICENSE is the Apache License 2.0" grep -q "Apache License" LICENSE
t_ok "Artifact Hub links: names and https URLs" bash -c \
  "jq -r '.annotations[\"artifacthub.io/links\"]' <<<'$chart_json' | python3 -c 'import sys,yaml; l=yaml.safe_load(sys.stdin); sys.exit(0 if l and all(x[\"name\"] and x[\"url\"].startswith(\"https://\") for x in l) else 1)'"
t_ok "CHANGELOG.md has a section for $app" grep -qE "^## $app\$" CHANGELOG.md
t_ok "CHANGELOG.md has an Unreleased section" grep -qE "^## Unreleased\$" CHANGELOG.md
t_summary
