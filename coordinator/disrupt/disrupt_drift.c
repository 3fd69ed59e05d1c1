/* disrupt_drift: has a claim drifted from what it would be launched as today, and from what? Karpenter's checks in
 * its order: the NodePool template's hash, the NodePool's requirements against the node's labels, the node class's
 * hash, and the Proxmox template (its VMID and config digest) the node class names on the claim's host. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

#define DIGEST_SHOWN 12 /* hex digits of a digest in a message */

static const char *const REASONS[] = {
        [DISRUPT_DRIFT_NODEPOOL] = "NodePoolDrifted",
        [DISRUPT_DRIFT_REQUIREMENTS] = "RequirementsDrifted",
        [DISRUPT_DRIFT_NODECLASS] = "NodeClassDrifted",
        [DISRUPT_DRIFT_TEMPLATE] = "TemplateDrifted",
};

/* Labels every node of ours carries (Karpenter's well-known labels): a requirement on one of them that the node
 * lacks is no drift; any other label a requirement names must be there (unless it says NotIn or DoesNotExist). */
static const char *const WELL_KNOWN[] = {
        SIM_LABEL_NODEPOOL, SIM_LABEL_NODECLASS, SIM_LABEL_ZONE, SIM_LABEL_REGION, SIM_LABEL_INSTANCE_TYPE,
        SIM_LABEL_FAMILY, SIM_LABEL_ARCH, SIM_LABEL_OS, SIM_LABEL_CAPACITY_TYPE, "karpenter.sh/nodepool",
};

const char *disrupt_drift_reason(enum disrupt_drift d) {
        return d > DISRUPT_DRIFT_NONE && d <= DISRUPT_DRIFT_TEMPLATE ? REASONS[d] : NULL;
}

static bool well_known(const char *key) {
        for (size_t i = 0; i < sizeof WELL_KNOWN / sizeof WELL_KNOWN[0]; i++)
                if (strcmp(WELL_KNOWN[i], key) == 0)
                        return true;
        return false;
}

static bool listed(const struct sim_requirement *r, const char *v) {
        for (size_t k = 0; k < r->n_values; k++)
                if (r->values[k] && strcmp(r->values[k], v) == 0)
                        return true;
        return false;
}

static bool integer(const char *s, int64_t *ret) {
        char *end = NULL;
        if (!s || !*s)
                return false;
        long long v = strtoll(s, &end, 10);
        *ret = v;
        return *end == '\0';
}

/* Does the label value v (present) meet the requirement? As Karpenter's Intersects of the label's In [v]. */
static bool value_meets(const struct sim_requirement *r, const char *v) {
        int64_t have, bound;
        switch (r->op) {
        case SIM_OP_IN:
                return listed(r, v);
        case SIM_OP_NOT_IN:
                return !listed(r, v);
        case SIM_OP_EXISTS:
                return true;
        case SIM_OP_DOES_NOT_EXIST:
                return false;
        case SIM_OP_GT:
        case SIM_OP_LT:
                if (r->n_values != 1 || !integer(v, &have) || !integer(r->values[0], &bound))
                        return false;
                return r->op == SIM_OP_GT ? have > bound : have < bound;
        }
        return false;
}

/* Karpenter's Compatible of the node's labels with one requirement of the pool: a label the node has must meet it;
 * one it lacks is allowed when well known, or when the requirement says NotIn or DoesNotExist. */
static bool compatible(const struct sim_requirement *r, const char *v) {
        if (v)
                return value_meets(r, v);
        return well_known(r->key) || r->op == SIM_OP_NOT_IN || r->op == SIM_OP_DOES_NOT_EXIST;
}

static const char *const OPS[] = { "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt" };

/* "NodePool default requires topology.kubernetes.io/zone In [pve2], not topology.kubernetes.io/zone=pve1". */
static void say_requirement(const struct sim_requirement *r, const char *v, const char *pool, char *buf, size_t len) {
        char vals[160] = "";
        size_t n = 0;
        for (size_t k = 0; k < r->n_values && n < sizeof vals; k++)
                n += (size_t)snprintf(vals + n, sizeof vals - n, "%s%s", k ? ", " : "", r->values[k]);
        char has[DISRUPT_MESSAGE_MAX];
        if (v)
                disrupt__say(has, sizeof has, "not %s=%s", r->key, v);
        else
                disrupt__say(has, sizeof has, "and its node has no label %s", r->key);
        disrupt__say(buf, len, "NodePool %s requires %s %s%s%s%s, %s", pool, r->key, OPS[r->op],
                     r->n_values ? " [" : "", vals, r->n_values ? "]" : "", has);
}

static const struct sim_nodepool *sim_pool(const struct sim_input *s, const char *name) {
        for (size_t p = 0; s && name && p < s->n_pools; p++)
                if (s->pools[p]->name && strcmp(s->pools[p]->name, name) == 0)
                        return s->pools[p];
        return NULL;
}

/* The first requirement of the candidate's NodePool its node's labels do not meet. */
static bool requirements_drifted(const struct disrupt_input *in, const struct disrupt_candidate *c, char *what,
                                 size_t len) {
        const struct sim_nodepool *p = sim_pool(in->sim, c->pool);
        for (size_t k = 0; p && c->sim && k < p->n_reqs; k++) {
                const struct sim_requirement *r = &p->reqs[k];
                const char *v = r->key ? simulate_label_get(c->sim->labels, c->sim->n_labels, r->key) : NULL;
                if (r->key && !compatible(r, v)) {
                        say_requirement(r, v, c->pool, what, len);
                        return true;
                }
        }
        return false;
}

/* Known on both sides, and a different VM, or the same VM with a different config (a digest on both sides). */
static bool template_drifted(const struct disrupt_candidate *c, char *what, size_t len) {
        const struct disrupt_template *was = &c->template_launched, *now = &c->template_now;
        if (!was->vmid || !now->vmid)
                return false;
        if (was->vmid != now->vmid) {
                disrupt__say(what, len, "the Proxmox template on %s is VM %" PRIu32 " now, it was cloned from VM "
                             "%" PRIu32, was->host ? was->host : "its host", now->vmid, was->vmid);
                return true;
        }
        if (!was->digest || !now->digest || strcmp(was->digest, now->digest) == 0)
                return false;
        disrupt__say(what, len, "the Proxmox template VM %" PRIu32 " on %s changed since launch (config digest %.*s, "
                     "was %.*s)", now->vmid, was->host ? was->host : "its host", DIGEST_SHOWN, now->digest,
                     DIGEST_SHOWN, was->digest);
        return true;
}

static const struct disrupt_pool *pool_of(const struct disrupt_input *in, const char *name) {
        for (size_t p = 0; name && p < in->n_pools; p++)
                if (strcmp(in->pools[p].name, name) == 0)
                        return &in->pools[p];
        return NULL;
}

/* The class's hash today, of the version the claim recorded. */
static const char *class_hash(const struct disrupt_input *in, const struct disrupt_candidate *c) {
        bool v2 = c->nodeclass_hash_version && strcmp(c->nodeclass_hash_version, DISRUPT_NODECLASS_HASH_VERSION) == 0;
        for (size_t k = 0; c->nodeclass && k < in->n_classes; k++)
                if (strcmp(in->classes[k].name, c->nodeclass) == 0)
                        return v2 ? in->classes[k].hash : in->classes[k].hash_v1;
        return NULL;
}

enum disrupt_drift disrupt_drift_of(const struct disrupt_input *in, size_t i, char *what, size_t len) {
        const struct disrupt_candidate *c = &in->candidates[i];
        const struct disrupt_pool *p = pool_of(in, c->pool);
        const char *h = class_hash(in, c);
        if (p && c->nodepool_hash && strcmp(c->nodepool_hash, p->hash) != 0) {
                disrupt__say(what, len, "NodePool %s changed since launch", p->name);
                return DISRUPT_DRIFT_NODEPOOL;
        }
        if (requirements_drifted(in, c, what, len))
                return DISRUPT_DRIFT_REQUIREMENTS;
        if (c->nodeclass_hash && h && strcmp(c->nodeclass_hash, h) != 0) {
                disrupt__say(what, len, "ProxmoxNodeClass %s changed since launch", c->nodeclass);
                return DISRUPT_DRIFT_NODECLASS;
        }
        if (template_drifted(c, what, len))
                return DISRUPT_DRIFT_TEMPLATE;
        if (len)
                what[0] = '\0';
        return DISRUPT_DRIFT_NONE;
}
