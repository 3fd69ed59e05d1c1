/* intake: which pods need new room (kube-scheduler's Unschedulable verdict), and the batching window. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a pod is, or is not, a candidate for provisioning. Pure. */
enum intake_verdict {
        INTAKE_CANDIDATE = 0,       /* PodScheduled=False, reason Unschedulable */
        INTAKE_BOUND,               /* spec.nodeName is set */
        INTAKE_FINISHED,            /* phase Succeeded or Failed */
        INTAKE_TERMINATING,         /* metadata.deletionTimestamp is set */
        INTAKE_MIRROR,              /* a static pod's mirror (annotation kubernetes.io/config.mirror) */
        INTAKE_DAEMONSET,           /* owned by a DaemonSet: its controller places it, not us */
        INTAKE_NOT_UNSCHEDULABLE,   /* kube-scheduler has not (yet) found it unschedulable */
        INTAKE_MALFORMED,           /* not an object with metadata */
};

enum intake_verdict intake_classify_pod(const json_t *pod);

static inline bool intake_pod_is_candidate(const json_t *pod) {
        return intake_classify_pod(pod) == INTAKE_CANDIDATE;
}

/* The batching window (Karpenter's): it opens with the first new candidate, and closes batch_idle after the
 * last new candidate or batch_max after the first, whichever comes first. A pure state machine over
 * caller-supplied monotonic timestamps in milliseconds. */
struct intake_batch {
        uint64_t idle_ms, max_ms;
        bool open;
        int64_t first_ms, last_ms;
        size_t n_new; /* new candidates (or triggers) in the open window */
};

void intake_batch_init(struct intake_batch *b, uint64_t idle_ms, uint64_t max_ms);
/* A new candidate (or another reason to provision, such as a changed NodePool) arrived at now_ms. */
void intake_batch_add(struct intake_batch *b, int64_t now_ms);
/* When the open window closes (ms timestamp), or -1 when no window is open. */
int64_t intake_batch_deadline(const struct intake_batch *b);
/* True when a window is open and its deadline has passed. */
bool intake_batch_due(const struct intake_batch *b, int64_t now_ms);
/* Close the window; returns how many arrivals it held (0 when none was open). */
size_t intake_batch_close(struct intake_batch *b);
