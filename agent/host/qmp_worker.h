/* qmp_worker: a thread that asks QEMU for its vCPU threads over QMP, so a slow QEMU never stalls the event loop. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* One finished question. */
struct qmp_answer {
        int vmid, pid;  /* as asked */
        int error;      /* 0, or why QMP gave no vCPU threads (negative errno, as pinning_qmp_vcpu_threads) */
        int *tids;      /* tids[i]: the thread of vCPU i, 0 when QEMU did not list it; the taker frees it */
        unsigned n;
};

struct qmp_worker;

/* Start the thread; each conversation lasts at most timeout_ms. The thread blocks every signal (the event
 * loop takes them through a signalfd). 0, or -errno (-ENOMEM, -EAGAIN). */
int qmp_worker_start(int timeout_ms, struct qmp_worker **ret_worker);

/* Stop the thread: waits for the conversation in progress (at most timeout_ms), drops the questions not
 * asked yet and the answers not taken. NULL is fine. */
void qmp_worker_free(struct qmp_worker *w);

/* Readable (EPOLLIN) while an answer waits to be taken. */
int qmp_worker_fd(const struct qmp_worker *w);

/* Queue a question: query-cpus-fast on socket_path, for vmid and pid (carried into the answer). Never
 * blocks on QEMU. 0 or -ENOMEM. */
int qmp_worker_ask(struct qmp_worker *w, int vmid, int pid, const char *socket_path);

/* The oldest answer: 1 with *ret_answer filled, 0 when there is none (the fd is then not readable). */
int qmp_worker_take(struct qmp_worker *w, struct qmp_answer *ret_answer);
