/* hosttune_plan: host tuning decisions as pure functions: each CPU's role, where other IRQs go, the originals. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "hosttune_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* The role of cpu: LEAVE when it is not in online or is in reserved (NULL = none), BUSY when in busy, else FREE. */
static enum hosttune_role hosttune_cpu_role(unsigned cpu, const struct cpuset *online,
                                            const struct cpuset *reserved, const struct cpuset *busy) {
        if (!cpuset_test(online, cpu) || (reserved && cpuset_test(reserved, cpu)))
                return HOSTTUNE_LEAVE;
        return busy && cpuset_test(busy, cpu) ? HOSTTUNE_BUSY : HOSTTUNE_FREE;
}

enum hosttune_role hosttune_policy_role(unsigned cpu, const struct cpuset *policy, const struct cpuset *online,
                                        const struct cpuset *reserved, const struct cpuset *busy) {
        enum hosttune_role role = hosttune_cpu_role(cpu, online, reserved, busy);
        if (!policy)
                return role;
        CPUSET_FOREACH(other, policy) {
                enum hosttune_role r = hosttune_cpu_role((unsigned)other, online, reserved, busy);
                if (r == HOSTTUNE_LEAVE && cpuset_test(online, (unsigned)other))
                        return HOSTTUNE_LEAVE; /* an offline CPU of the policy has no say */
                if (r == HOSTTUNE_BUSY)
                        role = role == HOSTTUNE_LEAVE ? role : HOSTTUNE_BUSY;
        }
        return role;
}

const char *hosttune_role_to_string(enum hosttune_role role) {
        if (role == HOSTTUNE_BUSY)
                return "busy";
        if (role == HOSTTUNE_FREE)
                return "free";
        return "reserved";
}

int hosttune_irq_off_pinned(const struct cpuset *current, const struct cpuset *pinned, const struct cpuset *online,
                            struct cpuset **ret) {
        if (!cpuset_intersects(current, pinned))
                return 0;
        /* An IRQ on CPUs that are all offline or none online would look pinned-free; keep to online CPUs. */
        struct cpuset *want = cpuset_dup(current);
        if (!want)
                return -ENOMEM;
        cpuset_andnot(want, pinned);
        cpuset_and(want, online);
        if (cpuset_is_empty(want) && cpuset_copy(want, online) < 0) {
                cpuset_free(want);
                return -ENOMEM;
        }
        cpuset_andnot(want, pinned);
        if (cpuset_is_empty(want)) { /* every online CPU is pinned: nowhere else to go */
                cpuset_free(want);
                return 0;
        }
        *ret = want;
        return 1;
}

json_t *hosttune_originals_new(void) {
        return json_pack("{s:{}, s:{}}", "cpus", "irqs");
}

static int note(json_t *obj, const char *key, const char *value) {
        if (json_object_get(obj, key))
                return 0;
        return json_object_set_new(obj, key, json_string(value)) < 0 ? -ENOMEM : 1;
}

int hosttune_originals_note_cpu(json_t *orig, unsigned cpu, const char *file, const char *value) {
        char key[16];
        snprintf(key, sizeof key, "%u", cpu);
        json_t *cpus = json_object_get(orig, "cpus"), *entry = json_object_get(cpus, key);
        if (!entry && (json_object_set_new(cpus, key, json_object()) < 0 || !(entry = json_object_get(cpus, key))))
                return -ENOMEM;
        return note(entry, file, value);
}

int hosttune_originals_note_irq(json_t *orig, int irq, const struct cpuset *cpus) {
        char key[16], *list = cpuset_format(cpus);
        if (!list)
                return -ENOMEM;
        snprintf(key, sizeof key, "%d", irq);
        int r = note(json_object_get(orig, "irqs"), key, list);
        free(list);
        return r;
}

void hosttune_originals_forget_cpu(json_t *orig, unsigned cpu, const char *file) {
        char key[16];
        snprintf(key, sizeof key, "%u", cpu);
        json_t *cpus = json_object_get(orig, "cpus"), *entry = json_object_get(cpus, key);
        json_object_del(entry, file);
        if (entry && json_object_size(entry) == 0)
                json_object_del(cpus, key);
}

const char *hosttune_originals_irq(const json_t *orig, int irq) {
        char key[16];
        snprintf(key, sizeof key, "%d", irq);
        return json_string_value(json_object_get(json_object_get(orig, "irqs"), key));
}

void hosttune_originals_forget_irq(json_t *orig, int irq) {
        char key[16];
        snprintf(key, sizeof key, "%d", irq);
        json_object_del(json_object_get(orig, "irqs"), key);
}

static bool all_strings(const json_t *obj) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v)
                if (!json_is_string(v))
                        return false;
        return true;
}

bool hosttune_originals_valid(const json_t *orig) {
        const json_t *cpus = json_object_get(orig, "cpus"), *irqs = json_object_get(orig, "irqs");
        if (!json_is_object(cpus) || !json_is_object(irqs) || !all_strings(irqs))
                return false;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)cpus, key, v)
                if (!json_is_object(v) || !all_strings(v))
                        return false;
        return true;
}

size_t hosttune_originals_count(const json_t *orig) {
        size_t n = json_object_size(json_object_get(orig, "irqs"));
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(orig, "cpus"), key, v)
                n += json_object_size(v);
        return n;
}
