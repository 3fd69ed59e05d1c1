/* intake: which pods need new room (kube-scheduler's Unschedulable verdict), and the batching window. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "intake.h"

#include <string.h>

#include "kube.h"
#include "kube_object.h"
#include "kube_types.h"

#define MIRROR_ANNOTATION "kubernetes.io/config.mirror"

static bool is_set(const json_t *v) {
        return v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0);
}

/* The PodScheduled condition says False / Unschedulable. */
static bool unschedulable(const json_t *status) {
        const json_t *c = kube_condition(status, "PodScheduled");
        const char *st = kube_str(c, "status"), *reason = kube_str(c, "reason");
        return st && strcmp(st, "False") == 0 && reason && strcmp(reason, "Unschedulable") == 0;
}

static bool finished(const json_t *status) {
        const char *phase = kube_str(status, "phase");
        return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

enum intake_verdict intake_classify_pod(const json_t *pod) {
        const json_t *meta = json_object_get(pod, "metadata");
        const json_t *spec = json_object_get(pod, "spec"), *status = json_object_get(pod, "status");
        if (!json_is_object(meta))
                return INTAKE_MALFORMED;
        if (is_set(json_object_get(spec, "nodeName")))
                return INTAKE_BOUND;
        if (finished(status))
                return INTAKE_FINISHED;
        if (kube_deleting(pod))
                return INTAKE_TERMINATING;
        if (json_object_get(kube_meta_of(pod).annotations, MIRROR_ANNOTATION))
                return INTAKE_MIRROR;
        if (kube_owned_by_daemonset(pod))
                return INTAKE_DAEMONSET;
        return unschedulable(status) ? INTAKE_CANDIDATE : INTAKE_NOT_UNSCHEDULABLE;
}

/* ---- batching ---- */

void intake_batch_init(struct intake_batch *b, uint64_t idle_ms, uint64_t max_ms) {
        *b = (struct intake_batch){ .idle_ms = idle_ms, .max_ms = max_ms < idle_ms ? idle_ms : max_ms };
}

void intake_batch_add(struct intake_batch *b, int64_t now_ms) {
        if (!b->open) {
                b->open = true;
                b->first_ms = b->last_ms = now_ms;
                b->n_new = 0;
        }
        if (now_ms > b->last_ms)
                b->last_ms = now_ms;
        b->n_new++;
}

int64_t intake_batch_deadline(const struct intake_batch *b) {
        if (!b->open)
                return -1;
        int64_t idle = b->last_ms + (int64_t)b->idle_ms, max = b->first_ms + (int64_t)b->max_ms;
        return idle < max ? idle : max;
}

bool intake_batch_due(const struct intake_batch *b, int64_t now_ms) {
        return b->open && now_ms >= intake_batch_deadline(b);
}

size_t intake_batch_close(struct intake_batch *b) {
        size_t n = b->open ? b->n_new : 0;
        b->open = false;
        b->n_new = 0;
        return n;
}
