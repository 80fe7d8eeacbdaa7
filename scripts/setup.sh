#!/usr/bin/env bash
# setup.sh: installs the Debian (bookworm) packages the project needs when they are missing,
# then configures and builds. Idempotent; safe to run on every test or demo run.
#   scripts/setup.sh            build/ (RelWithDebInfo)
#   scripts/setup.sh --asan     also build-asan/ (ASan+UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config clang
  libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev libssl-dev libyaml-dev
  libcmocka-dev libpcre2-dev libyajl-dev libgnutls28-dev
  prometheus victoria-metrics curl openssl python3 python3-yaml valgrind jq)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The prometheus package may start a system service; tests run their own instances.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    $SUDO systemctl stop prometheus || true
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
if [ "${1:-}" = "--asan" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
    -DCMA_SANITIZE=address,undefined >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
fi
echo "setup: build/custom-metrics-adapter is ready"
