/* leader: leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "leader.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"
#include "kube_types.h"

void leader_init(struct leader *l, const struct leader_options *o) {
        *l = (struct leader){ .o = *o };
        if (!l->o.name)
                l->o.name = LEADER_DEFAULT_NAME;
        if (l->o.lease_duration_ms <= 0)
                l->o.lease_duration_ms = LEADER_DEFAULT_DURATION_MS;
        if (l->o.renew_deadline_ms <= 0)
                l->o.renew_deadline_ms = LEADER_DEFAULT_RENEW_DEADLINE_MS;
        if (l->o.retry_ms <= 0)
                l->o.retry_ms = LEADER_DEFAULT_RETRY_MS;
}

enum leader_action leader_decide(struct leader *l, const json_t *lease, int64_t now_ms) {
        if (!lease)
                return LEADER_CREATE;
        struct kube_lease ls;
        kube_lease_decode(lease, &ls);
        const char *holder = ls.holder_identity, *renew = ls.renew_time;
        char seen[sizeof l->observed];
        snprintf(seen, sizeof seen, "%s|%s", holder ? holder : "", renew ? renew : "");
        if (strcmp(seen, l->observed) != 0 || l->observed_at == 0) {
                snprintf(l->observed, sizeof l->observed, "%s", seen);
                l->observed_at = now_ms;
        }
        if (holder && strcmp(holder, l->o.identity) == 0)
                return LEADER_RENEW;
        if (!holder || !*holder)
                return LEADER_TAKE;
        /* Like client-go, judge expiry by our own clock: how long since the record last changed. */
        return now_ms - l->observed_at > l->o.lease_duration_ms ? LEADER_TAKE : LEADER_WAIT;
}

json_t *leader_lease(const struct leader *l, const json_t *base, bool taking, const char *now) {
        json_t *lease = base ? json_deep_copy(base)
                             : json_pack("{s:s, s:s, s:{s:s, s:s}, s:{}}", "apiVersion", "coordination.k8s.io/v1",
                                         "kind", "Lease", "metadata", "name", l->o.name, "namespace", l->o.namespace,
                                         "spec");
        json_t *spec = json_object_get(lease, "spec");
        if (!json_is_object(spec)) {
                spec = json_object();
                json_object_set_new(lease, "spec", spec);
        }
        json_int_t transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
        json_object_set_new(spec, "holderIdentity", json_string(l->o.identity));
        json_object_set_new(spec, "leaseDurationSeconds", json_integer((l->o.lease_duration_ms + 999) / 1000));
        json_object_set_new(spec, "renewTime", json_string(now));
        if (taking || !base) {
                json_object_set_new(spec, "acquireTime", json_string(now));
                json_object_set_new(spec, "leaseTransitions", json_integer(base ? transitions + 1 : 0));
        }
        return lease;
}

static void micro_now(char *buf, size_t len) {
        struct timeval tv;
        struct tm tm;
        gettimeofday(&tv, NULL);
        gmtime_r(&tv.tv_sec, &tm);
        size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, len - n, ".%06ldZ", (long)tv.tv_usec);
}

/* Write the lease; true when we hold it afterwards. */
static bool write_lease(struct leader *l, struct kube_client *kube, const json_t *base, bool taking) {
        char now[40];
        micro_now(now, sizeof now);
        json_t *lease = leader_lease(l, base, taking, now);
        int r = -ENOMEM;
        if (lease && base)
                r = kube_update(kube, &kube_leases, l->o.namespace, NULL, lease, NULL);
        else if (lease)
                r = kube_create(kube, &kube_leases, l->o.namespace, lease, NULL);
        json_decref(lease);
        if (r < 0 && r != -ESTALE && r != -EEXIST && r != -ECANCELED)
                log_error("lease %s/%s: %s", l->o.namespace, l->o.name, kube_client_error(kube));
        return r == 0;
}

static void set_leading(struct leader *l, bool leading) {
        if (leading != l->leading)
                log_info("lease %s/%s: %s (identity %s)", l->o.namespace, l->o.name,
                         leading ? "became the leader" : "stopped leading", l->o.identity);
        l->leading = leading;
}

bool leader_step(struct leader *l, struct kube_client *kube, int64_t now_ms) {
        json_t *lease = NULL;
        int r = kube_get(kube, &kube_leases, l->o.namespace, l->o.name, &lease);
        bool ok = false;
        if (r == 0 || r == -ENOENT) {
                enum leader_action a = leader_decide(l, r == 0 ? lease : NULL, now_ms);
                ok = a != LEADER_WAIT && write_lease(l, kube, a == LEADER_CREATE ? NULL : lease, a == LEADER_TAKE);
                if (a == LEADER_WAIT) {
                        set_leading(l, false);
                        json_decref(lease);
                        return false;
                }
        } else if (r != -ECANCELED) {
                log_error("lease %s/%s: %s", l->o.namespace, l->o.name, kube_client_error(kube));
        }
        json_decref(lease);
        if (ok)
                l->renewed_at = now_ms;
        /* A failed renewal keeps the lead until the renew deadline passes. */
        set_leading(l, ok || (l->leading && now_ms - l->renewed_at < l->o.renew_deadline_ms));
        return l->leading;
}

json_t *leader_released(const json_t *base, const char *now) {
        json_t *lease = json_deep_copy(base), *spec = json_object_get(lease, "spec");
        if (!json_is_object(spec)) {
                spec = json_object();
                json_object_set_new(lease, "spec", spec);
        }
        json_object_del(spec, "holderIdentity");
        json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
        json_object_set_new(spec, "renewTime", json_string(now));
        json_object_set_new(spec, "acquireTime", json_string(now));
        return lease;
}

void leader_release(struct leader *l, struct kube_client *kube) {
        json_t *lease = NULL, *released = NULL;
        char now[40];
        if (!l->leading)
                return;
        int r = kube_get(kube, &kube_leases, l->o.namespace, l->o.name, &lease);
        struct kube_lease ls = { 0 };
        if (r == 0)
                kube_lease_decode(lease, &ls);
        const char *holder = ls.holder_identity;
        if (r == 0 && holder && strcmp(holder, l->o.identity) == 0) {
                micro_now(now, sizeof now);
                released = leader_released(lease, now);
                r = released ? kube_update(kube, &kube_leases, l->o.namespace, NULL, released, NULL) : -ENOMEM;
        }
        if (r < 0 && r != -ENOENT && r != -ESTALE) /* gone, or changed by another replica: nothing to give up */
                log_error("lease %s/%s: not released: %s", l->o.namespace, l->o.name, kube_client_error(kube));
        else if (released)
                log_info("lease %s/%s: released", l->o.namespace, l->o.name);
        l->leading = false;
        json_decref(released);
        json_decref(lease);
}
