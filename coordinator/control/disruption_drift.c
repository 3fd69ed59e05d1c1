/* disruption_drift: the drift side of the scale-down pass against the cluster: the Proxmox templates the candidates'
 * node classes name today (looked up once per host and pass), and each candidate's Drifted condition, set with the
 * drift's reason or removed once the drift is gone (Karpenter's nodeclaim disruption controller). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kube.h"
#include "launcher_plan.h"
#include "log.h"
#include "pve.h"
#include "kube_object.h"
#include "kube_types.h"

#define CONDITION_DRIFTED "Drifted"

/* ---- today's templates ---- */

/* The VM list of a host, fetched once per pass (lists: "<region>/<host>" -> the list, or null when it failed). */
static const json_t *vm_list(struct pve_client *pve, json_t *lists, const char *region, const char *host) {
        char key[512];
        json_t *list = NULL;
        snprintf(key, sizeof key, "%s/%s", region, host);
        if (json_object_get(lists, key))
                return json_object_get(lists, key);
        if (pve_vm_list(pve, host, &list) < 0) {
                log_warning("disruption: the VMs of %s in region %s (for template drift): %s", host, region,
                            pve_client_error(pve));
                list = json_null();
        }
        json_object_set_new(lists, key, list);
        return list;
}

/* The template the entry's ref names on its host now, and its config's digest, into the entry; "unknown": true when
 * the lookup failed or no template matches (any more): nothing to compare then, and a Drifted condition stays as it
 * is, as Karpenter leaves it when the cloud provider cannot tell. */
static void look_up(struct provisioner *p, json_t *lists, json_t *e) {
        const char *region = json_string_value(json_object_get(e, "region"));
        const char *host = json_string_value(json_object_get(e, "host"));
        struct pve_client *pve = provisioner_pve(p, region);
        const json_t *list = pve ? vm_list(pve, lists, region, host) : NULL;
        json_t *config = NULL;
        uint32_t vmid;
        json_object_set_new(e, "unknown", json_true());
        if (!json_is_array(list) || pve_find_template_ref(list, json_object_get(e, "ref"), &vmid) < 0)
                return;
        if (pve_vm_config_get(pve, host, vmid, &config) < 0) {
                log_warning("disruption: the config of template %u on %s (for template drift): %s", vmid, host,
                            pve_client_error(pve));
                return;
        }
        const char *digest = json_string_value(json_object_get(config, "digest"));
        json_object_set_new(e, "vmid", json_integer(vmid));
        if (digest)
                json_object_set_new(e, "digest", json_string(digest));
        json_object_del(e, "unknown");
        json_decref(config);
}

void disruption_drift_templates(struct provisioner *p, struct disruption_input *di) {
        json_t *lists = json_object(), *e;
        const char *key;
        if (!p || !lists) {
                json_decref(lists);
                return;
        }
        json_object_foreach(di->templates, key, e) {
                look_up(p, lists, e);
        }
        json_decref(lists);
        disruption_input_templates_found(di);
}

/* ---- the Drifted condition ---- */

struct drift_want {
        const char *reason;  /* NULL: not drifted, the condition goes */
        const char *message;
        int64_t now_ms;
};

/* Does the claim's Drifted condition already say what w wants? */
static bool as_wanted(const json_t *claim, const struct drift_want *w) {
        const json_t *c = kube_condition(json_object_get(claim, "status"), CONDITION_DRIFTED);
        const char *status = json_string_value(json_object_get(c, "status"));
        const char *reason = json_string_value(json_object_get(c, "reason"));
        const char *message = json_string_value(json_object_get(c, "message"));
        if (!w->reason)
                return !c;
        return status && strcmp(status, "True") == 0 && reason && strcmp(reason, w->reason) == 0 && message &&
               strcmp(message, w->message) == 0;
}

static bool remove_condition(json_t *status, const char *type) {
        json_t *conds = json_object_get(status, "conditions"), *c;
        size_t i;
        json_array_foreach(conds, i, c) {
                const char *t = json_string_value(json_object_get(c, "type"));
                if (t && strcmp(t, type) == 0)
                        return json_array_remove(conds, i) == 0;
        }
        return false;
}

static int modify(json_t *claim, void *userdata) {
        const struct drift_want *w = userdata;
        json_t *status = json_object_get(claim, "status");
        if (as_wanted(claim, w))
                return KUBE_MODIFY_SKIP;
        if (!w->reason)
                return remove_condition(status, CONDITION_DRIFTED) ? 0 : KUBE_MODIFY_SKIP;
        if (!json_is_object(status) && json_object_set_new(claim, "status", status = json_object()) < 0)
                return -ENOMEM;
        return launcher_condition_set(status, CONDITION_DRIFTED, "True", w->reason, w->message, w->now_ms);
}

static void sync_one(struct kube_client *kube, const json_t *claim, struct drift_want *w) {
        const char *name = kube_meta_of(claim).name;
        if (!name || as_wanted(claim, w))
                return;
        int r = kube_modify_from(kube, &kube_nodeclaims, NULL, name, "status", claim, modify, w, 3, NULL);
        if (r < 0 && r != -ENOENT)
                log_warning("disruption: NodeClaim %s: cannot write its Drifted condition: %s", name,
                            kube_client_error(kube));
        else if (r == 0 && w->reason)
                log_info("disruption: NodeClaim %s: Drifted (%s): %s", name, w->reason, w->message);
        else if (r == 0)
                log_info("disruption: NodeClaim %s: no longer drifted", name);
}

/* Was candidate i's template to be looked up, and could it not be? */
static bool template_unknown(const struct disruption_input *di, size_t i) {
        const char *key = json_string_value(json_array_get(di->template_keys, i));
        const json_t *e = key ? json_object_get(di->templates, key) : NULL;
        return json_is_true(json_object_get(e, "unknown"));
}

void disruption_drift_conditions(struct kube_client *kube, const struct disruption_input *di, int64_t now_ms) {
        char what[DISRUPT_MESSAGE_MAX];
        for (size_t i = 0; i < di->n_candidates; i++) {
                const json_t *claim = di->claims[i];
                if (kube_deleting(claim))
                        continue;
                enum disrupt_drift d = disrupt_drift_of(&di->in, i, what, sizeof what);
                if (d == DISRUPT_DRIFT_NONE && template_unknown(di, i))
                        continue; /* it may have drifted by its template: the condition stays as it is */
                struct drift_want w = { .reason = disrupt_drift_reason(d), .message = what, .now_ms = now_ms };
                sync_one(kube, claim, &w);
        }
}
