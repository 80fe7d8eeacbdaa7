#!/usr/bin/env bash
# fresh-root-check.sh: runs the README's two commands on the reference fresh machine: a debootstrap
# --variant=minbase Debian bookworm root with only git added, this repository cloned into it (its
# committed HEAD, as a user would get it) and ../shared beside it, both commands run as root inside
# the root (chroot) in order. Prints each command's time and exit code; exits non-zero when either
# fails. Not part of the test command (it takes 20-30 minutes); run it before releasing.
#   scripts/fresh-root-check.sh [--keep] [DIR]     DIR default: a new temp dir under /var/tmp
# Needs root, debootstrap and the network to the machine's own Debian mirror (read from apt's
# sources). --keep leaves DIR in place (unmounted) for a look afterwards; the two commands' logs
# are kept in DIR.logs/ either way.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
shared=$(cd .. && pwd)/shared

keep=0
dir=""
for arg in "$@"; do
  case $arg in
    --keep) keep=1 ;;
    -h | --help)
      sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *) dir=$arg ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-root-check: run as root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh-root-check: apt-get install debootstrap" >&2; exit 2; }
[ -d "$shared" ] || { echo "fresh-root-check: ../shared is missing" >&2; exit 2; }

# The machine's own Debian mirror: deb822 sources first, then the one-line format.
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list \
  /etc/apt/sources.list.d/*.list 2>/dev/null)
mirror=${mirror:-http://deb.debian.org/debian}

[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/cma-fresh-root.XXXXXX)
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null; done
  [ "$keep" = 1 ] || rm -rf --one-file-system "$dir"
}
trap cleanup EXIT

echo "fresh-root-check: debootstrap --variant=minbase bookworm $dir $mirror"
t0=$SECONDS
if ! debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1; then
  tail -20 "$dir.debootstrap.log"
  exit 1
fi
rm -f "$dir.debootstrap.log"
echo "fresh-root-check: debootstrap took $((SECONDS - t0)) s"

# On a real machine "/" is a mount point; make the root one too (a bind mount onto itself), or
# tools that remount "/" in a new mount namespace (buildah's layer store) fail with EINVAL.
mount --bind "$dir" "$dir" || exit 1
mounts+=("$dir")
for m in proc sys dev dev/pts; do
  mkdir -p "$dir/$m"
  case $m in
    proc) mount -t proc proc "$dir/proc" ;;
    sys) mount --rbind /sys "$dir/sys" ;;
    dev) mount --rbind /dev "$dir/dev" ;;
    dev/pts) continue ;;
  esac
  mounts+=("$dir/$m")
done
cp /etc/resolv.conf "$dir/etc/resolv.conf"
# A new machine of this workplace trusts the same extra CAs as this one (its egress proxy signs the
# npm registry's certificate) and has the same CA environment variables: carry both into the root.
# ca-certificates, which setup.sh installs, adds these CAs to /etc/ssl/certs/ca-certificates.crt.
mkdir -p "$dir/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/" 2>/dev/null
ca_env=()
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE GIT_SSL_CAINFO; do
  [ -z "${!v:-}" ] || ca_env+=("$v=${!v}")
done

in_root() { chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 "${ca_env[@]}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

echo "fresh-root-check: apt-get install git"
in_root bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null' ||
  exit 1
mkdir -p "$dir/work"
git clone -q "$repo" "$dir/work/main" || exit 1
cp -a "$shared" "$dir/work/shared"

logs=$dir.logs
mkdir -p "$logs"
status=0
for cmd in scripts/demo.sh scripts/test.sh; do
  log=$logs/$(basename "$cmd" .sh).log
  echo "fresh-root-check: running $cmd (log: $log)"
  t0=$SECONDS
  in_root bash -c "cd /work/main && $cmd" </dev/null >"$log" 2>&1
  rc=$?
  echo "fresh-root-check: $cmd exited $rc after $((SECONDS - t0)) s; its last lines:"
  tail -n 12 "$log" | sed 's/^/  | /'
  [ $rc -eq 0 ] || status=1
done
[ "$keep" = 1 ] && echo "fresh-root-check: kept $dir"
exit $status
