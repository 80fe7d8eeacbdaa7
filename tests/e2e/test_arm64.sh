#!/usr/bin/env bash
# test_arm64.sh: the adapter on linux/arm64, run under qemu user emulation (qemu-aarch64-static called directly: no binfmt_misc needed). 1. The cross build (cmake/aarch64-linux-gnu.cmake; $CMA_ARM64_BIN, default build-matrix/aarch64-linux-gnu/custom-metrics-adapter, made by scripts/test.sh's "build arm64" step): an AArch64 ELF whose libraries are all AArch64, --version and --check-config as the amd64 build prints them, then a smoke test against a real Prometheus and the fake kube-apiserver on loopback (start, discovery, one value, SIGTERM exit 0). 2. The chart (deploy/helm/custom-metrics-adapter) rendered with helm template, with its default values and with each prometheus-adapter values file in tests/fixtures/helm-values: nothing in it names an architecture, so the same release pulls whichever variant a node needs. 3. The image: deploy/image/Containerfile built by buildah for linux/amd64 and linux/arm64 into one manifest list (the arm64 variant with the cross toolchain in an amd64 build stage; under scripts/test.sh a variant test_image.sh built in the same run is checked, not built again: tests/lib/image.sh), labels, size bound, USER, and the ELF header of every file in each variant names only that variant's machine; then the arm64 variant, mounted, run as the prometheus-community chart runs it (chroot as uid 65532, read-only root, PID 1 of its own PID namespace, under qemu): discovery and a value, SIGTERM exit 0.
# cost: high (the arm64 image build: a few minutes on 2 cores)
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh
# shellcheck source=tests/lib/image.sh
source tests/lib/image.sh

QEMU=$(command -v qemu-aarch64-static)
ARM_BIN=${CMA_ARM64_BIN:-build-matrix/aarch64-linux-gnu/custom-metrics-adapter}
case $ARM_BIN in /*) ;; *) ARM_BIN="$CMA_ROOT/$ARM_BIN" ;; esac
VERSION=$(sed -n 's/^project(custom-metrics-adapter VERSION \([^ )]*\).*/\1/p' CMakeLists.txt)
T0=$SECONDS

if [ -z "$QEMU" ] || [ ! -f "$ARM_BIN" ]; then
  t_fail "qemu-aarch64-static ($QEMU) and the arm64 build ($ARM_BIN) are there" \
    "scripts/setup.sh installs qemu-user-static; build with cmake/aarch64-linux-gnu.cmake"
  t_summary
  exit 1
fi

# elf_machine FILE: the Machine field of FILE's ELF header ("" when it is not an ELF file).
elf_machine() { readelf -h "$1" 2>/dev/null | sed -n 's/^ *Machine: *//p'; }

# --- 1. the cross build ---------------------------------------------------------------------------
t_eq "$ARM_BIN: an AArch64 ELF file" AArch64 "$(elf_machine "$ARM_BIN")"
t_eq "its interpreter is the arm64 loader" "/lib/ld-linux-aarch64.so.1" \
  "$(readelf -l "$ARM_BIN" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')"
# What the arm64 loader resolves (Debian's multiarch libc6:arm64 and the lib*:arm64 packages).
loaded=$("$QEMU" /lib/ld-linux-aarch64.so.1 --list "$ARM_BIN" 2>&1)
t_ok "the arm64 loader resolves every library (under qemu)" bash -c \
  'grep -q "libcurl.so.4" <<<"$1" && ! grep -q "not found" <<<"$1"' _ "$loaded"
libs=$(grep -o '/[^ ]*' <<<"$loaded" | LC_ALL=C sort -u)
t_eq "each of those $(wc -l <<<"$libs") libraries is an AArch64 ELF file" "" \
  "$(for l in $libs; do [ "$(elf_machine "$l")" = AArch64 ] || echo "$l: $(elf_machine "$l")"; done)"

out=$("$QEMU" "$ARM_BIN" --version 2>&1)
t_eq "--version under qemu: exit 0, the project's version" "0 custom-metrics-adapter v$VERSION" \
  "$? $(cut -d' ' -f1-2 <<<"$out")"
out=$("$QEMU" "$ARM_BIN" --check-config --config=config/gpu-dcgm.yaml 2>&1)
t_eq "--check-config config/gpu-dcgm.yaml under qemu" \
  "0 config/gpu-dcgm.yaml: OK: 4 rules, 0 externalRules, resourceRules absent" "$? $out"

gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
if ! CMA_BIN=$ARM_BIN CMA_WRAPPER=$QEMU start_adapter config/gpu-dcgm.yaml; then
  t_fail "the arm64 adapter starts under qemu and serves /healthz" "$(tail -n 30 "$ADAPTER_LOG")"
  t_summary
  exit 1
fi
t_pass "the arm64 adapter starts under qemu and serves /healthz"
t_eq "the serving process is qemu-aarch64-static running the arm64 binary" \
  "$(readlink -f "$QEMU") $ARM_BIN" \
  "$(readlink -f "/proc/$ADAPTER_PID/exe") $(tr '\0' '\n' <"/proc/$ADAPTER_PID/cmdline" | sed -n 2p)"
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 120
want_names=$(for r in namespaces nodes pods; do
  for m in DCGM_FI_DEV_FB_USED DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_PROF_GR_ENGINE_ACTIVE; do
    echo "$r/$m"
  done
done | sort | paste -sd' ')
t_json "kubectl discovery v1beta1: every rule x resource of config/gpu-dcgm.yaml" \
  "$(adapter_get /apis/custom.metrics.k8s.io/v1beta1)" '[.resources[].name] | sort | join(" ")' \
  "$want_names"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod \
  '.labels.namespace == "ml" and .labels.pod != null and (.labels.pod | startswith("bert-"))')
t_ok "oracle: three bert pods" test "$(wc -l <<<"$want_bert")" -eq 3
r=$(adapter_get "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
t_eq "kubectl by-selector app=bert: each pod's average GPU utilisation" "$want_bert" "$(item_values "$r")"
stop_adapter
t_eq "SIGTERM: the arm64 adapter exits 0" 0 "$?"
T_SMOKE=$((SECONDS - T0))

# --- 2. the chart names no architecture -----------------------------------------------------------
H=$CMA_ROOT/.tools/bin/helm
ARCH_WORDS='amd64|arm64|x86[_-]64|aarch64|armhf|ppc64le|s390x|kubernetes\.io/arch'
chart=deploy/helm/custom-metrics-adapter
for values in "" tests/fixtures/helm-values/*.yaml; do
  label="helm template ${values:-(default values)}"
  out=$("$H" template cma "$chart" --namespace metrics ${values:+-f "$values"} 2>&1)
  rc=$?
  t_ok "$label: renders, with the adapter's Deployment" bash -c \
    '[ "$1" -eq 0 ] && grep -q "^kind: Deployment" <<<"$2"' _ "$rc" "$out"
  # The chart adds no architecture of its own: a line that names one is the values file's, passed
  # through (yieon-lyon-prometheus-ha.yaml pins its release to arm64 nodes with a nodeSelector).
  t_eq "$label: nothing names an architecture but what the values file says (no arch nodeSelector, affinity or image suffix of the chart's)" "" \
    "$(grep -iE "$ARCH_WORDS" <<<"$out" | sed 's/^ *//' | while IFS= read -r line; do
      [ -n "$values" ] && sed 's/^ *//' "$values" | grep -qxF -- "$line" || echo "$line"
    done | head -5)"
done
t_ok "a values file pins the release to arm64 nodes (so the image must have an arm64 variant)" \
  grep -q 'kubernetes.io/arch: arm64' tests/fixtures/helm-values/yieon-lyon-prometheus-ha.yaml

# --- 3. the image, for both architectures -----------------------------------------------------------
image_storage_ready || exit 1
# The variants and their build arguments are tests/lib/image.sh's: under scripts/test.sh the amd64
# one is test_image.sh's build of this run, when it ran first (it then checks the same image).
LIST_REF=$IMG_LIST
REVISION=$IMG_REVISION
SOURCE=$IMG_SOURCE
image_cleanup() {
  [ -n "${ADAPTER_PID:-}" ] && cma_stop "$ADAPTER_PID" 10
  if [ -n "${ctr:-}" ]; then
    bh umount "$ctr" >/dev/null 2>&1
    bh rm "$ctr" >/dev/null 2>&1
  fi
  image_variants_remove
}
ctr=""
cma_on_exit image_cleanup
# One platform per build (the arm64 one after the amd64 one), each tagged $LIST_REF-ARCH and added
# to the manifest list $LIST_REF.
if ! image_variants amd64 arm64; then
  t_fail "buildah build --platform linux/amd64, then linux/arm64, --manifest deploy/image/Containerfile" \
    "$IMG_BUILD_ERR"
  t_summary
  exit 1
fi
T_BUILD=$IMG_BUILD_SECS
t_pass "buildah build --platform linux/amd64, then linux/arm64, into one manifest list ($(image_variants_note))"
list=$(bh manifest inspect "$LIST_REF")
t_json "the manifest list holds linux/amd64 and linux/arm64" "$list" \
  '[.manifests[].platform | "\(.os)/\(.architecture)"] | sort | join(" ")' "linux/amd64 linux/arm64"

# check_variant ARCH MACHINE: the variant of the list for linux/ARCH: config, labels, size, and the
# ELF header of every file names MACHINE. Leaves it mounted at $M (container $ctr).
check_variant() {
  local arch=$1 machine=$2 ref=$LIST_REF-$1 digest cfg oci size blob bad
  digest=$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' <<<"$list")
  t_eq "$arch: the list's linux/$arch entry is the $arch build" "$digest" \
    "$(bh images --digests --format '{{.Digest}}' "$ref" 2>&1 | head -n 1)"
  cfg=$(bh inspect --type image "$ref" 2>&1)
  t_json "$arch: image config names linux/$arch, USER 65532:65532, ENTRYPOINT the binary" "$cfg" \
    '"\(.OCIv1.os)/\(.OCIv1.architecture) \(.OCIv1.config.User) \(.OCIv1.config.Entrypoint | tojson)"' \
    "linux/$arch 65532:65532 [\"/usr/local/bin/custom-metrics-adapter\"]"
  t_json "$arch: OCI labels (title, version, revision, source, licenses)" "$cfg" \
    '.OCIv1.config.Labels | [."org.opencontainers.image.title", ."org.opencontainers.image.version",
      ."org.opencontainers.image.revision", ."org.opencontainers.image.source",
      ."org.opencontainers.image.licenses"] | join(" ")' \
    "custom-metrics-adapter $VERSION $REVISION $SOURCE Apache-2.0"
  oci="$CMA_TMP/oci-$arch"
  bh push -q "$ref" "oci:$oci" >/dev/null 2>&1
  size=0
  for blob in $(jq -r '.manifests[0].digest | sub(":"; "/")' "$oci/index.json" 2>/dev/null |
    xargs -I{} jq -r '.layers[].digest | sub(":"; "/")' "$oci/blobs/{}" 2>/dev/null); do
    size=$((size + $(gzip -dc "$oci/blobs/$blob" 2>/dev/null | wc -c)))
  done
  t_ok "$arch: image size $size bytes is under 40 MB ($SIZE_BOUND bytes)" \
    test "$size" -gt 0 -a "$size" -lt "$SIZE_BOUND"
  eval "size_$arch=$size"
  ctr=$(bh from --pull=never --name "cma-arm64-test-$arch-$$" "$ref") || ctr=""
  M=$(bh mount "$ctr" 2>/dev/null)
  if [ -z "$ctr" ] || [ ! -d "$M" ]; then
    t_fail "$arch: buildah from + buildah mount of the variant"
    return 1
  fi
  bad=$(cd "$M" && find . -type f | while read -r f; do
    case $f in ./etc/*) continue ;; esac # text: passwd, group, hosts, nsswitch.conf, CA bundle
    [ "$(elf_machine "$f")" = "$machine" ] || echo "$f: $(elf_machine "$f")"
  done)
  t_eq "$arch: every file but /etc's text files is a $machine ELF file ($(cd "$M" && find . -type f | wc -l) files)" "" "$bad"
  t_eq "$arch: /etc holds only text (passwd, group, nsswitch.conf, hosts, the CA bundle)" \
    "./etc/group ./etc/hosts ./etc/nsswitch.conf ./etc/passwd ./etc/ssl/certs/ca-certificates.crt" \
    "$(cd "$M" && find ./etc -type f | LC_ALL=C sort | paste -sd' ')"
}
check_variant amd64 "Advanced Micro Devices X86-64"
bh umount "$ctr" >/dev/null 2>&1 && bh rm "$ctr" >/dev/null 2>&1
ctr=""
check_variant arm64 AArch64 || {
  t_summary
  exit 1
}
t_ok "arm64: the loader is /lib/ld-linux-aarch64.so.1; no x86-64 loader" bash -c \
  '[ -f "$1/lib/ld-linux-aarch64.so.1" ] && [ ! -e "$1/lib64" ]' _ "$M"
t_ok "arm64: the binary is stripped (no .symtab)" bash -c \
  '! readelf -S "$1" | grep -q "[.]symtab"' _ "$M/usr/local/bin/custom-metrics-adapter"

# The arm64 variant, run as the chart runs it, with qemu-aarch64-static (static: it runs in the
# chroot) from a read-only /test-tools.
mkdir -p "$M/proc" "$M/dev" "$M/tmp" "$M/etc/adapter" "$M/test-tools" \
  "$M/var/run/secrets/kubernetes.io/serviceaccount"
for d in null zero random urandom; do : >"$M/dev/$d"; done
VOL="$CMA_TMP/volumes"
mkdir -p "$VOL/tmp" "$VOL/config" "$VOL/sa" "$VOL/tools"
chmod 1777 "$VOL/tmp"
cp config/gpu-dcgm.yaml "$VOL/config/config.yaml"
cp "$QEMU" "$VOL/tools/"
printf '%s\n' '127.0.0.1 localhost' '127.0.0.1 prometheus.test' >"$VOL/kubelet-hosts"
printf fake-admin >"$VOL/sa/token"
cp "$KUBE_CA" "$VOL/sa/ca.crt"
printf custom-metrics >"$VOL/sa/namespace"
out=$(in_container /test-tools/qemu-aarch64-static /adapter /adapter --version 2>&1)
t_eq "arm64 image: /adapter /adapter --version under qemu (uid 65532, read-only root)" \
  "0 custom-metrics-adapter v$VERSION" "$? $(cut -d' ' -f1-2 <<<"$out")"
t_ok "arm64 image: the binary's revision is the build-arg REVISION" grep -q "$REVISION" <<<"$out"
ADAPTER_LOG="$CMA_TMP/adapter-image.log"
if IMG_EMU=/test-tools/qemu-aarch64-static start_in_image 65532:65532 "$VOL/tmp"; then
  t_pass "arm64 image: the adapter serves /healthz with the chart's arguments, under qemu"
  t_ok "arm64 image: discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL custom.metrics.k8s.io/v1beta1 120
  r=$(adapter_get "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
  t_eq "arm64 image: by-selector app=bert, each pod's average GPU utilisation" "$want_bert" \
    "$(item_values "$r")"
  stop_in_image
  t_eq "arm64 image: SIGTERM to PID 1, exit status 0" 0 "$?"
else
  t_fail "arm64 image: the adapter serves /healthz with the chart's arguments, under qemu" \
    "$(tail -n 30 "$ADAPTER_LOG")"
fi

cma_log "timings: smoke ${T_SMOKE}s, image builds ${T_BUILD}s, whole test $((SECONDS - T0))s; sizes amd64 ${size_amd64:-?} arm64 ${size_arm64:-?} bytes"
t_summary
