/* leader: leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kube.h"

#define LEADER_DEFAULT_NAME "pvescale-coordinator"
#define LEADER_DEFAULT_DURATION_MS 15000
#define LEADER_DEFAULT_RENEW_DEADLINE_MS 10000
#define LEADER_DEFAULT_RETRY_MS 2000

struct leader_options {
        const char *namespace, *name, *identity;
        int64_t lease_duration_ms; /* another holder's lease is taken over this long after it last changed */
        int64_t renew_deadline_ms; /* the leader steps down when it could not renew for this long */
        int64_t retry_ms;          /* how often to try (and renew) */
};

/* What to do with the lease as read. Pure. */
enum leader_action {
        LEADER_CREATE, /* there is no lease: create it, holding it */
        LEADER_RENEW,  /* we hold it: renew */
        LEADER_TAKE,   /* free, or its holder stopped renewing: take it over */
        LEADER_WAIT,   /* someone else holds it */
};

struct leader {
        struct leader_options o;
        bool leading;
        char observed[512];    /* holderIdentity + renewTime as last seen */
        int64_t observed_at;   /* monotonic ms when observed last changed */
        int64_t renewed_at;    /* monotonic ms of our last successful write */
};

void leader_init(struct leader *l, const struct leader_options *o);

/* Decide from the lease (NULL when it does not exist), at monotonic now_ms; updates the observation. Pure. */
enum leader_action leader_decide(struct leader *l, const json_t *lease, int64_t now_ms);

/* The lease object holding it for us at wall time now (RFC 3339 micro); base: the lease as read, or NULL to
 * create one. taking: set acquireTime and count a transition. New reference. Pure. */
json_t *leader_lease(const struct leader *l, const json_t *base, bool taking, const char *now);

/* One round against the API: read, decide, write. Updates l->leading (and logs changes). Returns whether this
 * replica leads now. */
bool leader_step(struct leader *l, struct kube_client *kube, int64_t now_ms);

/* The lease given up at wall time now, as client-go's ReleaseOnCancel leaves it: no holder, a duration of 1 s,
 * renewTime and acquireTime now, the transitions kept. New reference. Pure. */
json_t *leader_released(const json_t *base, const char *now);

/* Give the lease up when this replica leads (once the work it guards has stopped), so that another replica takes
 * over at once instead of after the lease duration. A lease someone else holds by now is left alone. */
void leader_release(struct leader *l, struct kube_client *kube);
