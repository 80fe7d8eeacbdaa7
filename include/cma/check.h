/* check.h: the `check` subcommand (`custom-metrics-adapter check [--kubeconfig=PATH]
 * [--apiservice=NAME]... [--timeout=DURATION]`): asks the Kubernetes API whether each APIService
 * of the adapter is Available and whether discovery of its group version, through kube-apiserver
 * as the HPA controller reads it, lists at least one resource (a metric), and prints one line per
 * APIService saying what is wrong. The chart's `helm test` hook runs it in-cluster; people run it
 * with a kubeconfig. Main thread only; nothing is shared. */
#ifndef CMA_CHECK_H
#define CMA_CHECK_H

#include <stddef.h>
#include <stdio.h>

struct cma_kube;

/* The subcommand: argv[0] is "check", the flags follow. Prints the report to out and usage errors
 * to errout. Returns the exit status: 0 when every APIService checked works (and at least one was
 * checked), 1 when one does not, 2 on a usage error or a client that cannot be built. */
int cma_check_main(int argc, char **argv, FILE *out, FILE *errout);

/* The checks with a client the caller owns: names[0..n) (borrowed); n == 0 checks every APIService
 * of the adapter's groups that is registered (v1beta1 and v1beta2 of custom.metrics.k8s.io,
 * v1beta1 of external.metrics.k8s.io and metrics.k8s.io). One line per APIService and a summary go
 * to out. Returns the number of APIServices that do not work, or 1 when none was checked. */
size_t cma_check_run(struct cma_kube *k, const char *const *names, size_t n, FILE *out);

#endif
