#!/usr/bin/env bash
# test_image.sh: the container image (deploy/image/Containerfile), built and run offline. Debian's buildah builds it for this machine's platform (--isolation chroot, --storage-driver vfs, a private storage root; under scripts/test.sh one build a run, shared with test_arm64.sh: tests/lib/image.sh) from a base image imported from a debootstrap minbase tarball of bookworm (the machine's apt mirror; tarball and imported image cached in .cache/image/). Checks: size under the documented 40 MB bound; image config (USER 65532:65532, ENTRYPOINT); the exact file list (binary, /adapter, what the image's own loader resolves, CA bundle, passwd/group, nsswitch.conf, hosts), no shell, no package manager; a first argument "/adapter" ignored as the prometheus-community chart passes it; in the image as uid 65532 with a read-only root: EROFS on writes, --version, --check-config (good and bad), glibc name and user lookups, then the server with the chart's arguments as PID 1 against a real Prometheus and the fake kube-apiserver (in-cluster config): discovery and a value through kubectl and curl, only --cert-dir written, SIGTERM exit 0, and again as uid 10001.
# cost: high (about a minute alone: scripts/test.sh starts it early)
#
# What the chroot stands in for: a container runtime (containerd/CRI-O with runc). None can start
# containers on these machines (crun's setrlimit is refused), so the test does by hand what the
# runtime does for the pod: it mounts the image (`buildah mount`), creates the mount points in the
# container's own layer, and runs the entrypoint in a private mount namespace (unshare -m; for the
# server also a PID namespace, so the adapter is PID 1) with the root bind-mounted read-only
# (readOnlyRootFilesystem), /proc and /dev/{null,zero,random,urandom} (a runtime always provides
# them; --version and --check-config also run without either), an emptyDir at /tmp, the
# ConfigMap at /etc/adapter, the service-account token and CA at
# /var/run/secrets/kubernetes.io/serviceaccount and a kubelet-style /etc/hosts (read-only), as
# `chroot --userspec=65532:65532` with an empty environment plus KUBERNETES_SERVICE_HOST/PORT.
# There is no network namespace: the adapter listens on 127.0.0.1, as a pod's process would on
# its own loopback.
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/lib/common.sh
source tests/lib/common.sh

# shellcheck source=tests/lib/image.sh
source tests/lib/image.sh
ARCH=$(dpkg --print-architecture)
T0=$SECONDS

# --- storage, base image, build ------------------------------------------------------------------
image_storage_ready || exit 1
T_BASE=$((SECONDS - T0))
# image_cleanup: at exit, the adapter first (it runs inside the container's root), then the
# container and the built image (kept for test_arm64.sh when scripts/test.sh shares it). The base
# image stays for the next run.
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
# The build test_arm64.sh also checks (the same build arguments: tests/lib/image.sh).
if ! image_variants "$ARCH"; then
  t_fail "buildah build --platform linux/$ARCH deploy/image/Containerfile" "$IMG_BUILD_ERR"
  t_summary
  exit 1
fi
T_BUILD=$IMG_BUILD_SECS
IMG_REF=$IMG_LIST-$ARCH
t_pass "buildah build --isolation chroot --storage-driver vfs --platform linux/$ARCH deploy/image/Containerfile ($(image_variants_note))"

# --- the image: size, config, files ----------------------------------------------------------------
# The size: the image as an OCI layout; its layers uncompressed (what `docker images` and
# `buildah images` show) and compressed as pushed (what a registry stores and a node pulls).
oci="$CMA_TMP/oci"
bh push -q "$IMG_REF" "oci:$oci" >/dev/null 2>&1
layers=$(jq -r '.manifests[0].digest | sub(":"; "/")' "$oci/index.json" 2>/dev/null |
  xargs -I{} jq -r '.layers[] | "\(.mediaType) \(.digest | sub(":"; "/"))"' "$oci/blobs/{}" 2>/dev/null)
size=0 gz_size=0
while read -r media blob; do
  [ -n "$blob" ] || continue
  gz_size=$((gz_size + $(stat -c %s "$oci/blobs/$blob")))
  case $media in
    *+gzip) size=$((size + $(gzip -dc "$oci/blobs/$blob" | wc -c))) ;;
    *) size=$((size + $(stat -c %s "$oci/blobs/$blob"))) ;;
  esac
done <<<"$layers"
t_ok "image size $size bytes (compressed $gz_size) is under 40 MB ($SIZE_BOUND bytes)" \
  test "$size" -gt 0 -a "$size" -lt "$SIZE_BOUND"
cfg=$(bh inspect --type image "$IMG_REF")
t_json "image config: USER 65532:65532" "$cfg" '.OCIv1.config.User' "65532:65532"
t_json "image config: ENTRYPOINT is the binary, no CMD" "$cfg" \
  '"\(.OCIv1.config.Entrypoint | tojson) \(.OCIv1.config.Cmd // [] | tojson)"' \
  '["/usr/local/bin/custom-metrics-adapter"] []'
t_json "image config: one layer" "$cfg" '.OCIv1.rootfs.diff_ids | length' 1

ctr=$(bh from --pull=never --name "cma-image-test-$$" "$IMG_REF") || ctr=""
M=$(bh mount "$ctr" 2>/dev/null)
if [ -z "$ctr" ] || [ ! -d "$M" ]; then
  t_fail "buildah from + buildah mount of the image"
  t_summary
  exit 1
fi

# image_files: every file and symlink in the image, one path a line, sorted.
image_files() { (cd "$M" && find . -mindepth 1 ! -type d | sed 's|^\.||' | LC_ALL=C sort); }
# The libraries: what the image's own dynamic loader resolves for the binary, inside the image.
loaded=$(chroot "$M" /lib64/ld-linux-x86-64.so.2 --list /usr/local/bin/custom-metrics-adapter 2>&1)
t_ok "the image's loader resolves every library inside the image" bash -c '! grep -q "not found" <<<"$1"' _ "$loaded"
libs=$(grep -o '/[^ ]*' <<<"$loaded" | LC_ALL=C sort -u)
t_ok "libc, libcurl, libgnutls, libmicrohttpd and libssl are among them" bash -c \
  'for l in libc.so.6 libcurl.so.4 libgnutls.so.30 libmicrohttpd.so.12 libssl.so.3; do grep -q "/$l\$" <<<"$1" || exit 1; done' _ "$libs"
want=$(printf '%s\n' /adapter /usr/local/bin/custom-metrics-adapter /etc/passwd /etc/group \
  /etc/nsswitch.conf /etc/hosts /etc/ssl/certs/ca-certificates.crt "$libs" | LC_ALL=C sort -u)
t_eq "files: exactly the binary, /adapter, the loaded libraries, CA bundle, passwd, group, nsswitch.conf, hosts" \
  "$want" "$(image_files)"
t_eq "/adapter is a symlink to the binary" /usr/local/bin/custom-metrics-adapter "$(readlink "$M/adapter")"
t_ok "no shell and no package manager (sh, bash, dash, apt, apt-get, dpkg, busybox)" bash -c \
  '! find "$1" \( -name sh -o -name bash -o -name dash -o -name "apt*" -o -name "dpkg*" -o -name busybox \) | grep -q .' _ "$M"
t_eq "/etc/passwd: root and nonroot (65532)" \
  "root:x:0:0:root:/root:/usr/sbin/nologin|nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin" \
  "$(paste -sd'|' "$M/etc/passwd")"
t_eq "/etc/group: root and nonroot (65532)" "root:x:0:|nonroot:x:65532:" "$(paste -sd'|' "$M/etc/group")"
t_ok "every file belongs to root and none is writable by others" bash -c \
  '! find "$1" \( ! -user 0 -o ! -group 0 -o \( ! -type l -perm /022 \) \) | grep -q .' _ "$M"
n_ca=$(openssl storeutl -noout -certs "$M/etc/ssl/certs/ca-certificates.crt" 2>&1 | sed -n 's/^Total found: //p')
t_ok "the CA bundle holds Debian's CA certificates (openssl parses $n_ca, more than 100)" \
  test "${n_ca:-0}" -gt 100
t_ok "the binary is stripped (no .symtab)" bash -c '! readelf -S "$1" | grep -q "[.]symtab"' _ "$M/usr/local/bin/custom-metrics-adapter"

# --- the container: mount points, read-only root ---------------------------------------------------
# What the runtime creates in the container's layer before it starts the process: mount points.
mkdir -p "$M/proc" "$M/dev" "$M/tmp" "$M/etc/adapter" "$M/test-tools" \
  "$M/var/run/secrets/kubernetes.io/serviceaccount"
for d in null zero random urandom; do : >"$M/dev/$d"; done
# snapshot: every path in the container's root with type, owner, mode, size and content hash.
snapshot() {
  (cd "$M" && find . -xdev -mindepth 1 -printf '%y %U:%G %m %s %p\n' | LC_ALL=C sort &&
    find . -xdev -type f -exec sha256sum {} + | LC_ALL=C sort -k2)
}
before=$(snapshot)

VOL="$CMA_TMP/volumes"
mkdir -p "$VOL/tmp" "$VOL/config" "$VOL/sa" "$VOL/tools"
chmod 1777 "$VOL/tmp" # an emptyDir is world-writable
cp config/gpu-dcgm.yaml "$VOL/config/config.yaml"
cp tests/config-errors/bad-template/config.yaml "$VOL/config/bad.yaml"
# Two host tools that link only libc, so they run on the image's libc (and NSS) inside.
cp "$(command -v getent)" "$(command -v touch)" "$VOL/tools/"
printf '%s\n' '# Kubernetes-managed hosts file (kubelet-style).' '127.0.0.1 localhost' \
  '::1 localhost ip6-localhost ip6-loopback' '# Entries added by HostAliases.' \
  '127.0.0.1 prometheus.test' >"$VOL/kubelet-hosts"

# --- the read-only root and the writable emptyDir ------------------------------------------------------
out=$(in_container /test-tools/touch /probe /etc/probe 2>&1)
t_eq "writing into the root fails with EROFS, not just EACCES (the root is mounted read-only)" \
  "1 2" "$? $(grep -c 'Read-only file system' <<<"$out")"
out=$(in_container /test-tools/touch /tmp/probe 2>&1)
t_eq "uid 65532 can write into the emptyDir at /tmp" "0 65532" "$? $(stat -c %u "$VOL/tmp/probe" 2>&1)"
rm -f "$VOL/tmp/probe"

# --- version, first argument, check-config ------------------------------------------------------------
# The image is built with the build-arg REVISION (tests/lib/image.sh): --version shows it.
version="custom-metrics-adapter v$(sed -n 's/^project(custom-metrics-adapter VERSION \([^ )]*\).*/\1/p' CMakeLists.txt) (revision $IMG_REVISION)"
out=$(in_container --bare /adapter --version 2>&1)
t_eq "/adapter --version (uid 65532, read-only root, no /proc or /dev): the project's version" \
  "$version" "$out"
out=$(in_container --bare /adapter /adapter --version 2>&1)
t_eq "/adapter /adapter --version: the chart's first argument is ignored" "$version" "$out"
out=$(in_container --bare /usr/local/bin/custom-metrics-adapter /adapter --version 2>&1)
t_eq "ENTRYPOINT + the chart's args [/adapter, --version]: the version" "$version" "$out"
out=$(in_container --bare /adapter --version /adapter 2>&1)
t_eq "/adapter anywhere but first is still an error (exit 2)" \
  "2 Error: unexpected argument \"/adapter\": the adapter takes only flags" "$? $(head -n 1 <<<"$out")"
bin=$(cma_adapter_bin)
if [ -x "$bin" ]; then
  out=$("$bin" /adapter --version 2>&1)
  t_eq "host build $bin: a first argument /adapter is ignored" "$("$bin" --version 2>&1)" "$out"
  "$bin" /adapter /adapter --version >/dev/null 2>&1
  t_eq "host build: only the first /adapter is dropped (exit 2)" 2 "$?"
fi

t_eq "oracle: config/gpu-dcgm.yaml has 4 rules" 4 \
  "$(python3 -c 'import sys, yaml; print(len(yaml.safe_load(open(sys.argv[1]))["rules"]))' config/gpu-dcgm.yaml)"
out=$(in_container /adapter /adapter --check-config --config=/etc/adapter/config.yaml 2>&1)
t_eq "--check-config with config/gpu-dcgm.yaml as the ConfigMap" \
  "0 /etc/adapter/config.yaml: OK: 4 rules, 0 externalRules, resourceRules absent" "$? $out"
out=$(in_container --bare /adapter --check-config --config=/nonexistent.yaml 2>&1)
t_eq "--check-config of a missing file: exit 1, naming the file" "1 1" \
  "$? $(grep -c '/nonexistent\.yaml' <<<"$out")"
out=$(in_container /adapter --check-config --config=/etc/adapter/bad.yaml 2>&1)
t_eq "--check-config with tests/config-errors/bad-template: exit 1" 1 "$?"
t_eq "--check-config with tests/config-errors/bad-template: its expect.error, file:line:column" \
  "$(sed 's|^bad-template/config.yaml:|/etc/adapter/bad.yaml:|' tests/config-errors/bad-template/expect.error)" \
  "$(grep -F /etc/adapter/bad.yaml: <<<"$out" | head -n 1 | sed 's/^.* E //')"

# --- glibc inside the image: users and names ----------------------------------------------------------
t_eq "getent passwd 65532 (the image's libc, nsswitch.conf and /etc/passwd)" \
  "nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin" \
  "$(in_container /test-tools/getent passwd 65532 2>&1)"
t_eq "getent ahostsv4 localhost with the image's own /etc/hosts: 127.0.0.1" 127.0.0.1 \
  "$(in_container --image-hosts /test-tools/getent ahostsv4 localhost 2>&1 | awk '{print $1}' | sort -u)"
t_eq "getent hosts prometheus.test with a kubelet-style /etc/hosts (HostAliases): 127.0.0.1" \
  "127.0.0.1 prometheus.test" "$(in_container /test-tools/getent hosts prometheus.test 2>&1 | tr -s ' ')"

# --- the server, as the prometheus-community chart runs it ----------------------------------------
gen_dcgm || exit 1
if ! start_prometheus "$DCGM_DIR/dcgm.om" || ! start_fake_kube "$DCGM_DIR/pods.json"; then
  t_fail "start Prometheus and the fake kube-apiserver"
  t_summary
  exit 1
fi
# The service-account volume kubelet projects: the fake kube-apiserver's token and CA.
printf fake-admin >"$VOL/sa/token"
cp "$KUBE_CA" "$VOL/sa/ca.crt"
printf custom-metrics >"$VOL/sa/namespace"
ADAPTER_LOG="$CMA_TMP/adapter.log"

if ! start_in_image 65532:65532 "$VOL/tmp"; then
  t_fail "the adapter serves /healthz from the image"
  t_summary
  exit 1
fi
t_pass "the adapter serves /healthz from the image, with its self-signed certificate"
inner=$(pgrep -P "$ADAPTER_PID" | head -n 1)
t_eq "the adapter is PID 1 of its PID namespace, uid and gid 65532" \
  "custom-metrics-|65532 65532 65532 65532|65532 65532 65532 65532|1" \
  "$(awk '/^Name:/ { print $2 } /^NSpid:/ { print $NF } /^Uid:|^Gid:/ { print $2, $3, $4, $5 }' \
    "/proc/${inner:-0}/status" 2>&1 | paste -sd'|')"
t_ok "discovery lists DCGM_FI_DEV_GPU_UTIL (Prometheus reached by name through /etc/hosts)" \
  wait_discovery DCGM_FI_DEV_GPU_UTIL
want_names=$(for r in namespaces nodes pods; do
  for m in DCGM_FI_DEV_FB_USED DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_PROF_GR_ENGINE_ACTIVE; do
    echo "$r/$m"
  done
done | sort | paste -sd' ')
doc=$(adapter_get /apis/custom.metrics.k8s.io/v1beta1)
t_json "kubectl discovery v1beta1: every rule x resource of config/gpu-dcgm.yaml" "$doc" \
  '[.resources[].name] | sort | join(" ")' "$want_names"
want_bert=$(expected_agg DCGM_FI_DEV_GPU_UTIL avg pod \
  '.labels.namespace == "ml" and .labels.pod != null and (.labels.pod | startswith("bert-"))')
t_ok "oracle: three bert pods" test "$(wc -l <<<"$want_bert")" -eq 3
r=$(adapter_get "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert")
t_eq "kubectl by-selector app=bert: each pod's average GPU utilisation" "$want_bert" "$(item_values "$r")"
adapter_fetch /apis/custom.metrics.k8s.io/v1beta2
t_eq "curl discovery v1beta2: 200 application/json" "200 application/json" "$R_STATUS $R_CTYPE"
t_ok "in-cluster config: the adapter LISTed ml pods with the service-account token" \
  jq -e -s 'any(.[]; .path == "/api/v1/namespaces/ml/pods" and ((.headers.Authorization // "") == "Bearer fake-admin"))' \
  "$KUBE_REQUEST_LOG"
t_eq "the emptyDir holds only --cert-dir: the serving certificate and key, the client-CA union; owned by 65532" \
  "./cert 65532|./cert/apiserver.crt 65532|./cert/apiserver.key 65532|./cert/client-ca-union.crt 65532" \
  "$(cd "$VOL/tmp" && find . -mindepth 1 -printf '%p %U\n' | LC_ALL=C sort | paste -sd'|')"
t_ok "no write was refused by the read-only root (no EROFS in the log)" \
  bash -c '! grep -qi "read-only file system" "$1"' _ "$ADAPTER_LOG"

stop_in_image
t_eq "SIGTERM to PID 1: exit status 0" 0 "$?"

# The chart's own securityContext may set another uid (runAsUser, fsGroup 10001): the image must
# not depend on 65532. A fresh emptyDir as kubelet makes it with fsGroup (group 10001, 2777).
mkdir -p "$VOL/tmp-10001" && chown :10001 "$VOL/tmp-10001" && chmod 2777 "$VOL/tmp-10001"
if start_in_image 10001:10001 "$VOL/tmp-10001"; then
  t_pass "as uid 10001 (the chart's runAsUser/fsGroup): serves /healthz"
  t_ok "as uid 10001: discovery lists DCGM_FI_DEV_GPU_UTIL" wait_discovery DCGM_FI_DEV_GPU_UTIL
  t_eq "as uid 10001: the certificate is written into the emptyDir by 10001" "10001 10001" \
    "$(stat -c '%u %g' "$VOL/tmp-10001/cert/apiserver.crt" 2>&1)"
  stop_in_image
  t_eq "as uid 10001: SIGTERM, exit status 0" 0 "$?"
else
  t_fail "as uid 10001 (the chart's runAsUser/fsGroup): serves /healthz"
fi
t_eq "nothing in the container's root changed (readOnlyRootFilesystem)" "$before" "$(snapshot)"

cma_log "timings: base image ${T_BASE}s, build ${T_BUILD}s, whole test $((SECONDS - T0))s; image $size bytes, compressed $gz_size"
t_summary
