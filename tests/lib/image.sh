# shellcheck shell=bash
# image.sh: what the image tests (tests/e2e/test_image.sh, tests/e2e/test_arm64.sh) share: buildah on
# the tests' own storage in .cache/image/, the debootstrap minbase base image, the image's builds
# (one per variant a run of scripts/test.sh), and the stand-in
# for a container runtime (a read-only chroot into `buildah mount` in private namespaces; the
# header of test_image.sh says why). Source after tests/lib/common.sh.

SIZE_BOUND=$((40 * 1000 * 1000)) # bytes; "under 40 MB" (docs/image.md)
IMG_CACHE="$CMA_ROOT/.cache/image"
IMG_STORE="$IMG_CACHE/storage"
IMG_RUN="$IMG_CACHE/run"
BASE_TAR="$IMG_CACHE/bookworm-minbase.tar"
BASE_REF=localhost/cma-bookworm-minbase:latest
# The image under test. scripts/test.sh gives test_image.sh and test_arm64.sh one CMA_IMAGE_SHARE
# value a run: a variant either of them builds for it stays in the storage for the other, so a run
# builds each variant once (the amd64 one was built twice, a few minutes of a 2-core machine). Run
# alone, a script's key is its own pid and it removes what it built at exit. The build arguments
# are the same for both scripts, so a shared variant is exactly what either would have built.
IMG_SHARE=${CMA_IMAGE_SHARE:-pid$$}
case $IMG_SHARE in *[!A-Za-z0-9._-]*) IMG_SHARE=pid$$ ;; esac
IMG_LIST="localhost/custom-metrics-adapter:test-$IMG_SHARE" # manifest list; variant ARCH: $IMG_LIST-ARCH
IMG_REVISION="test-rev-$IMG_SHARE"
IMG_SOURCE=https://example.test/custom-metrics-adapter

# bh ARGS...: buildah on the test's own storage (never the system's).
bh() { buildah --root "$IMG_STORE" --runroot "$IMG_RUN" --storage-driver vfs "$@"; }

# apt_uri SUITE: the URI this machine's apt uses for SUITE (deb822 .sources first, then one-line
# .list files); fails when there is none.
apt_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$1" 'BEGIN { RS = ""; FS = "\n" }
      { uris = ""; suites = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); uris = $i }
          if ($i ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", $i); suites = " " $i " " }
        }
        if (index(suites, " " suite " ") && uris != "") { split(uris, u, " "); print u[1]; exit 0 } }' "$f"
  done | head -n 1 | grep . && return 0
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    sed -n "s/^deb[ \t]\+\(\[[^]]*\][ \t]\+\)\?\([^ \t]\+\)[ \t]\+$1[ \t].*/\2/p" "$f"
  done | head -n 1 | grep .
}

# make_base_tarball: debootstrap --variant=minbase of bookworm from this machine's mirror into
# $BASE_TAR, with apt sources as debian:bookworm-slim has them (bookworm, bookworm-updates,
# bookworm-security; each from this machine's mirror for it, when it has one).
make_base_tarball() {
  local mirror security root log="$CMA_TMP/debootstrap.log" key=/usr/share/keyrings/debian-archive-keyring.gpg
  mirror=$(apt_uri bookworm) || {
    cma_log "no bookworm apt source found in /etc/apt"
    return 1
  }
  root=$(mktemp -d "$IMG_CACHE/debootstrap.XXXX")
  cma_log "debootstrap --variant=minbase bookworm from $mirror"
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -rf "$root"
    return 1
  fi
  rm -f "$root/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm%s\nComponents: main\nSigned-By: %s\n' \
      "$mirror" "$(apt_uri bookworm-updates >/dev/null && echo ' bookworm-updates')" "$key"
    if security=$(apt_uri bookworm-security); then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\nSigned-By: %s\n' \
        "$security" "$key"
    fi
  } >"$root/etc/apt/sources.list.d/debian.sources"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -cf "$BASE_TAR.tmp.$$" . && mv "$BASE_TAR.tmp.$$" "$BASE_TAR"
  local rc=$?
  rm -rf "$root"
  return $rc
}

# base_image: $BASE_REF in the test's storage, imported from $BASE_TAR (made when missing).
base_image() {
  bh inspect --type image "$BASE_REF" >/dev/null 2>&1 && return 0
  [ -s "$BASE_TAR" ] || make_base_tarball || return 1
  local ctr
  ctr=$(bh from scratch) || return 1
  bh add "$ctr" "$BASE_TAR" / >/dev/null &&
    bh config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr" &&
    bh commit --rm -q "$ctr" "$BASE_REF" >/dev/null
}

# image_storage_ready: checks the tools, takes the storage's lock (held on fd 9 until the test
# exits: one image test at a time per storage, which also makes removing leftovers of killed runs
# safe), removes them, and makes the base image when it is missing. Counts a check; on a failure
# prints the summary and returns 1.
image_storage_ready() {
  for tool in buildah debootstrap unshare chroot; do
    if ! command -v "$tool" >/dev/null; then
      t_fail "$tool is installed (apt-get install buildah debootstrap)"
      t_summary
      return 1
    fi
  done
  mkdir -p "$IMG_CACHE" || return 1
  # One run at a time per storage: the lock also makes removing leftovers of killed runs safe.
  exec 9>"$IMG_CACHE/lock"
  flock -w 1800 9 || {
    t_fail "lock $IMG_CACHE/lock"
    t_summary
    return 1
  }
  bh rm --all >/dev/null 2>&1
  rm -rf "$IMG_CACHE"/debootstrap.* "$BASE_TAR".tmp.*
  bh images --format '{{.Name}}:{{.Tag}} {{.ID}}' 2>/dev/null | while read -r name id; do
    [ "$name" = "$BASE_REF" ] && continue
    [ -n "${CMA_IMAGE_SHARE:-}" ] && case $name in "$IMG_LIST" | "$IMG_LIST"-*) continue ;; esac
    bh rmi -f "$id" >/dev/null 2>&1
  done

  if ! base_image; then
    t_fail "base image $BASE_REF (debootstrap minbase bookworm, cached in .cache/image)"
    t_summary
    return 1
  fi
  t_pass "base image $BASE_REF (debootstrap minbase bookworm, cached in .cache/image)"
}

# image_variants ARCH...: the variants linux/ARCH of the Containerfile, tagged $IMG_LIST-ARCH and
# added to the manifest list $IMG_LIST; each one this run (CMA_IMAGE_SHARE) has not built yet is
# built now, one platform at a time, the build stage on this machine's architecture (Debian's
# buildah 1.28 does not set BUILDPLATFORM itself: without it the build stage would ask for a base
# image of the target's). Sets IMG_BUILT and IMG_REUSED (the architectures) and IMG_BUILD_SECS;
# on a failure IMG_BUILD_ERR holds the build's last lines.
image_variants() {
  local arch log="$CMA_TMP/build.log" t0=$SECONDS
  IMG_BUILT="" IMG_REUSED="" IMG_BUILD_ERR=""
  for arch in "$@"; do
    if bh inspect --type image "$IMG_LIST-$arch" >/dev/null 2>&1; then
      IMG_REUSED="$IMG_REUSED $arch"
      continue
    fi
    if ! bh build --isolation chroot --pull=never --platform "linux/$arch" --manifest "$IMG_LIST" \
      -t "$IMG_LIST-$arch" --build-arg "BASE_IMAGE=$BASE_REF" --build-arg "REVISION=$IMG_REVISION" \
      --build-arg "BUILDPLATFORM=linux/$(dpkg --print-architecture)" \
      --build-arg "SOURCE=$IMG_SOURCE" -f deploy/image/Containerfile . >>"$log" 2>&1; then
      IMG_BUILD_ERR="linux/$arch: $(tail -n 40 "$log")"
      IMG_BUILD_SECS=$((SECONDS - t0))
      return 1
    fi
    IMG_BUILT="$IMG_BUILT $arch"
  done
  IMG_BUILD_SECS=$((SECONDS - t0))
  IMG_BUILT=${IMG_BUILT# } IMG_REUSED=${IMG_REUSED# }
}
# image_variants_note: what image_variants did, for a check's name.
image_variants_note() {
  echo "built: ${IMG_BUILT:-none} in ${IMG_BUILD_SECS}s${IMG_REUSED:+; built earlier with CMA_IMAGE_SHARE=$IMG_SHARE: $IMG_REUSED}"
}
# image_variants_remove: at exit, the list and its variants, unless this run's other test may
# still need them (CMA_IMAGE_SHARE; the next image test's image_storage_ready removes them).
image_variants_remove() {
  [ -z "${CMA_IMAGE_SHARE:-}" ] || return 0
  local ref
  bh manifest rm "$IMG_LIST" >/dev/null 2>&1
  for ref in $(bh images --format '{{.Name}}:{{.Tag}}' 2>/dev/null); do
    case $ref in "$IMG_LIST"-*) bh rmi -f "$ref" >/dev/null 2>&1 ;; esac
  done
}

# container_cmd [--bare|--image-hosts] [--pid] [--user UID:GID] [--tmp DIR] [--env K=V]... CMD
# ARGS...: sets CC to a command line that runs CMD in the image as UID:GID (default 65532:65532,
# the image's USER) in a private mount namespace with the root read-only. By default with /proc,
# /dev/{null,zero,random,urandom}, the emptyDir at /tmp (DIR, default $VOL/tmp), the ConfigMap at
# /etc/adapter, the service-account dir, the kubelet-style /etc/hosts and a read-only /test-tools.
# --image-hosts: the image's own /etc/hosts instead; --bare: no mounts at all. Every step execs
# the next, so CC's pid ends up being CMD's; with --pid, CMD is PID 1 of a new PID namespace
# (as in a container) and CC's pid is unshare's, which waits for it and exits with its status.
container_cmd() {
  local mode=full envs=() user=65532:65532 tmp="$VOL/tmp" ns=()
  while :; do
    case $1 in
      --bare) mode=bare ;;
      --image-hosts) mode=image-hosts ;;
      --pid) ns=(--pid --fork --kill-child) ;;
      --user) user=$2 && shift ;;
      --tmp) tmp=$2 && shift ;;
      --env) envs+=("$2") && shift ;;
      *) break ;;
    esac
    shift
  done
  # shellcheck disable=SC2016 # expanded by the inner bash
  CC=(unshare -m "${ns[@]}" --propagation private env "M=$M" "VOL=$VOL" "TMPVOL=$tmp" "MODE=$mode" "USERSPEC=$user" \
    "CHROOT=$(command -v chroot)" bash -c '
    set -e
    mount --bind "$M" "$M"
    mount -o remount,bind,ro "$M"
    if [ "$MODE" != bare ]; then
      mount -t proc proc "$M/proc"
      for d in null zero random urandom; do mount --bind "/dev/$d" "$M/dev/$d"; done
      mount --bind "$TMPVOL" "$M/tmp"
      mount --bind -o ro "$VOL/config" "$M/etc/adapter"
      mount --bind -o ro "$VOL/sa" "$M/var/run/secrets/kubernetes.io/serviceaccount"
      mount --bind -o ro "$VOL/tools" "$M/test-tools"
      [ "$MODE" = image-hosts ] || mount --bind -o ro "$VOL/kubelet-hosts" "$M/etc/hosts"
    fi
    envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    exec env -i "${envs[@]}" "$CHROOT" --userspec="$USERSPEC" "$M" "$@"
  ' container "${envs[@]}" -- "$@")
}
# in_container ARGS...: container_cmd ARGS..., run in the foreground.
in_container() {
  container_cmd "$@"
  "${CC[@]}"
}

# start_in_image USER TMP_DIR: starts the adapter in the image as the chart's Deployment does:
# ENTRYPOINT, then the chart's args (its --cert-dir is under the /tmp emptyDir). Prometheus is
# named by a name only /etc/hosts knows; the kube-apiserver comes from KUBERNETES_SERVICE_HOST/
# PORT and the service-account dir. --bind-address=127.0.0.1 is the test's own (no network
# namespace). The adapter is PID 1 of its own PID namespace (with IMG_EMU set, e.g.
# /test-tools/qemu-aarch64-static, that emulator runs it: an image of another architecture). Waits for /healthz; exports
# ADAPTER_URL, ADAPTER_PID (unshare's pid), ADAPTER_CA, ADAPTER_KUBECONFIG.
start_in_image() {
  local port
  port=$(free_port)
  container_cmd --pid --user "$1" --tmp "$2" --env KUBERNETES_SERVICE_HOST=127.0.0.1 \
    --env "KUBERNETES_SERVICE_PORT=${KUBE_URL##*:}" \
    ${IMG_EMU:+"$IMG_EMU"} /usr/local/bin/custom-metrics-adapter /adapter --secure-port="$port" --cert-dir=/tmp/cert \
    --logtostderr=true --prometheus-url="http://prometheus.test:${PROM_URL##*:}" \
    --metrics-relist-interval=5s --v=2 --config=/etc/adapter/config.yaml --bind-address=127.0.0.1
  echo "=== start_adapter $(date +%H:%M:%S) in the image as $1: ${CC[*]: -10}" >>"$ADAPTER_LOG"
  _cma_spawn "$ADAPTER_LOG" "${CC[@]}"
  ADAPTER_PID=$_CMA_SPAWNED
  _cma_wait_ready adapter "$ADAPTER_PID" "$ADAPTER_LOG" "https://127.0.0.1:$port/healthz" \
    --cacert "$2/cert/apiserver.crt" || return 1
  export ADAPTER_URL="https://127.0.0.1:$port" ADAPTER_PID ADAPTER_CA="$2/cert/apiserver.crt" \
    ADAPTER_KUBECONFIG="$CMA_TMP/adapter.kubeconfig" ADAPTER_LOG
  cat >"$ADAPTER_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: adapter
  cluster: {server: "$ADAPTER_URL", certificate-authority: "$ADAPTER_CA"}
users:
- name: anonymous
  user: {username: anonymous} # not a credential: see start_adapter in tests/lib/common.sh
contexts:
- name: adapter
  context: {cluster: adapter, user: anonymous}
current-context: adapter
EOF
}

# stop_in_image: SIGTERM to the adapter (PID 1 in its namespace; unshare itself ignores SIGTERM),
# SIGKILL after 30 s; returns the adapter's exit status (unshare passes it on).
stop_in_image() {
  cma_stop "$ADAPTER_PID" 30
  local rc=$?
  unset ADAPTER_PID
  return $rc
}
