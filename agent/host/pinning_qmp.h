/* pinning_qmp: one short QMP conversation (greeting, qmp_capabilities, query-cpus-fast) on a QEMU control socket. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* How long one short-lived QMP conversation may take before pinning falls back to /proc. QEMU serves one
 * QMP client at a time and pvedaemon/pvestatd use the same socket, so a busy socket must not stall us. */
#define PINNING_QMP_TIMEOUT_MS 1000

/* vCPU threads through QMP on socket_path: connect, read the greeting, qmp_capabilities, query-cpus-fast,
 * skipping {"event": ...} lines, close; everything within timeout_ms. It blocks the calling thread for up to
 * timeout_ms (the agent asks from qmp_worker's thread). Result as pinning_parse_cpus_fast.
 * -ETIMEDOUT (e.g. another client holds the socket), -ECONNREFUSED/-ENOENT, -EPROTO for a QMP error reply,
 * -EBADMSG, -ENAMETOOLONG, -ENOMEM. */
int pinning_qmp_vcpu_threads(const char *socket_path, int timeout_ms, int **ret_tids, unsigned *ret_n);
