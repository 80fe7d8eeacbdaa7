#!/bin/sh
# in-pod.sh COMMAND [ARGS...]: runs COMMAND as if in a Kubernetes pod, for in-cluster auth tests
# (test_backend_auth.sh, test_credential_rotation.sh): a private mount namespace (tmpfs over /run,
# so the host is untouched) in which /var/run/secrets/kubernetes.io/serviceaccount is the
# directory $SA_MOUNT (bind-mounted, so a projected_write into it is seen inside). Nothing in the
# adapter knows. Needs root and `unshare -m`. Run it as `sh tests/lib/in-pod.sh ...`.
exec unshare -m --propagation private sh -c '
  mount -t tmpfs cma-run /run &&
  mkdir -p /run/secrets/kubernetes.io/serviceaccount &&
  mount --bind "$SA_MOUNT" /run/secrets/kubernetes.io/serviceaccount &&
  exec "$@"' in-pod "$@"
