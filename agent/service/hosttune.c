/* hosttune: the host side of pinning: cpufreq governors of busy and free cores, IRQ affinity of the VMs' devices. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "hosttune.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "fileio.h"
#include "inventory.h"
#include "ledger.h"
#include "log.h"
#include "prom.h"

#define STATE_MAX_BYTES (4u << 20)

/* ---- which CPUs are whose ---- */

/* The host CPUs of a running VM: its reservation's placement when it is bound to one, else its affinity
 * option; NULL when not running or not known. */
static const struct cpuset *vm_host_cpus(const struct hosttune_env *env, const struct vm *vm) {
        if (!vm->running)
                return NULL;
        const struct reservation *r = env->ledger ? ledger_find_vmid(env->ledger, vm->vmid) : NULL;
        if (r && r->placement && r->placement->cpus)
                return r->placement->cpus;
        return vm->affinity;
}

/* The host CPUs of a running container pinned by its raw cpuset: what the kernel says it runs on, else the pin.
 * A floating container has none (pvestatd moves it, like a floating VM). */
static const struct cpuset *container_host_cpus(const struct container *ct) {
        if (!ct->running || !ct->cpuset)
                return NULL;
        return ct->effective ? ct->effective : ct->cpuset;
}

/* Busy cores: those of running VMs with known CPUs and of running pinned containers. */
static struct cpuset *busy_cpus(const struct hosttune_env *env) {
        struct cpuset *busy = cpuset_new();
        for (size_t i = 0; busy && i < env->inventory->n_vms; i++) {
                const struct cpuset *c = vm_host_cpus(env, env->inventory->vms[i]);
                if (c && cpuset_or(busy, c) < 0) {
                        cpuset_free(busy);
                        return NULL;
                }
        }
        for (size_t i = 0; busy && i < env->inventory->containers.n; i++) {
                const struct cpuset *c = container_host_cpus(env->inventory->containers.items[i]);
                if (c && cpuset_or(busy, c) < 0) {
                        cpuset_free(busy);
                        return NULL;
                }
        }
        return busy;
}

/* ---- the originals' state file ---- */

static int state_path(const struct hosttune_env *env, char *buf, size_t size) {
        int n = snprintf(buf, size, "%s/%s", env->state_dir, HOSTTUNE_STATE_FILE);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int save_originals(struct hosttune_state *s, const struct hosttune_env *env) {
        char path[PATH_MAX];
        int r = state_path(env, path, sizeof path);
        if (r < 0)
                return r;
        _cleanup_free_ char *text = json_dumps(s->originals, JSON_SORT_KEYS | JSON_INDENT(1));
        if (!text)
                return -ENOMEM;
        r = fileio_write_atomic(path, text, strlen(text), 0600);
        return r < 0 ? log_error_errno(r, "cannot save the original host settings in %s; not changing them", path)
                     : 0;
}

static void remove_state(const struct hosttune_env *env) {
        char path[PATH_MAX];
        if (state_path(env, path, sizeof path) == 0 && unlink(path) < 0 && errno != ENOENT)
                log_warning_errno(-errno, "cannot remove %s", path);
}

/* ---- writes, and their failures logged when they start ---- */

/* Whether a failed write means no file of its kind can be written (a read-only mount, missing privileges):
 * logged once for all of them rather than once per file. */
static bool fails_everywhere(int r) {
        return r == -EROFS || r == -EACCES || r == -EPERM;
}

/* Count a write and log a failure when it starts. Failures are keyed by what failed, or by cause alone when
 * group is given (one cpufreq file of every CPU: a governor the driver lacks fails on all of them) or when
 * nothing of the kind can be written. */
static void note_write(struct hosttune_state *s, const char *what, const char *group, int r) {
        char cause[96];
        snprintf(cause, sizeof cause, "%s errno %d", group ? group : "", -r);
        const char *key = r < 0 && (group || fails_everywhere(r)) ? cause : what;
        json_t *before = json_object_get(s->failing, key);
        if (r == 0) {
                s->writes++;
                if (before)
                        log_info("%s is written again", what);
                json_object_del(s->failing, what);
                return;
        }
        s->write_failures++;
        if (before && json_integer_value(before) == r)
                return;
        log_error("cannot write %s: %s%s%s", what, strerror(-r),
                  r == -EROFS ? " (read-only: ProtectKernelTunables=yes in the unit; see docs/agent.md)" : "",
                  key == cause ? "; other files failing so are not logged" : "");
        json_object_set_new(s->failing, key, json_integer(r));
}

/* ---- governors ---- */

static void set_cpu_file(struct hosttune_state *s, const struct hosttune_env *env, unsigned cpu, const char *file,
                         const char *want, char current[HOSTTUNE_VALUE_MAX]) {
        if (!*want || strcmp(current, want) == 0)
                return;
        int added = hosttune_originals_note_cpu(s->originals, cpu, file, current);
        if (added < 0 || (added > 0 && save_originals(s, env) < 0))
                return;
        int r = hosttune_fs_write_cpu(env->root, cpu, file, want);
        if (r < 0 && added > 0) { /* nothing changed: nothing to restore */
                hosttune_originals_forget_cpu(s->originals, cpu, file);
                save_originals(s, env);
        }
        /* intel_pstate's performance governor holds EPP at "performance" and refuses other values. */
        if (r == -EBUSY && strcmp(file, HOSTTUNE_EPP) == 0)
                return;
        char what[96];
        snprintf(what, sizeof what, "cpu%u/cpufreq/%s", cpu, file);
        note_write(s, what, file, r);
        if (r == 0)
                snprintf(current, HOSTTUNE_VALUE_MAX, "%s", want);
}

static void tune_cpu(struct hosttune_state *s, const struct hosttune_env *env, struct hosttune_cpu *c) {
        if (!env->cpu_governors || c->role == HOSTTUNE_LEAVE)
                return;
        bool busy = c->role == HOSTTUNE_BUSY;
        /* The governor first: switching it may reset EPP to the driver's default. */
        set_cpu_file(s, env, c->cpu, HOSTTUNE_GOVERNOR, busy ? env->governor_busy : env->governor_free, c->governor);
        if (*c->epp)
                set_cpu_file(s, env, c->cpu, HOSTTUNE_EPP, busy ? env->epp_busy : env->epp_free, c->epp);
}

/* Read the governor of every online CPU that has one. */
static int read_cpus(struct hosttune_state *s, const struct hosttune_env *env, const struct cpuset *busy) {
        const struct cpuset *online = env->topology->online;
        struct hosttune_cpu *cpus = calloc(cpuset_count(online) + 1, sizeof *cpus);
        if (!cpus)
                return -ENOMEM;
        size_t n = 0;
        CPUSET_FOREACH(cpu, online) {
                struct hosttune_cpu *c = &cpus[n];
                c->cpu = (unsigned)cpu;
                if (hosttune_fs_read_cpu(env->root, c->cpu, HOSTTUNE_GOVERNOR, c->governor) < 0)
                        continue;
                if (hosttune_fs_read_cpu(env->root, c->cpu, HOSTTUNE_EPP, c->epp) < 0)
                        c->epp[0] = '\0';
                struct cpuset *policy = NULL;
                if (hosttune_fs_cpu_policy(env->root, c->cpu, &policy) < 0)
                        policy = NULL;
                c->role = hosttune_policy_role(c->cpu, policy, online,
                                               env->reserved_cpus, busy);
                cpuset_free(policy);
                n++;
        }
        free(s->cpus);
        s->cpus = cpus;
        s->n_cpus = n;
        return 0;
}

static void sync_governors(struct hosttune_state *s, const struct hosttune_env *env, const struct cpuset *busy) {
        if (read_cpus(s, env, busy) < 0)
                return;
        for (size_t i = 0; i < s->n_cpus; i++)
                tune_cpu(s, env, &s->cpus[i]);
}

/* ---- IRQs ---- */

/* Set an IRQ's affinity to want, remembering the original. 0 or -errno. */
static int steer_irq(struct hosttune_state *s, const struct hosttune_env *env, int irq, const struct cpuset *want,
                     bool log_failure) {
        struct cpuset *now = NULL;
        int r = hosttune_fs_read_irq(env->root, irq, &now);
        if (r == 0 && !cpuset_equal(now, want)) {
                int added = hosttune_originals_note_irq(s->originals, irq, now);
                r = added > 0 ? save_originals(s, env) : added;
                if (r == 0)
                        r = hosttune_fs_write_irq(env->root, irq, want);
                if (r < 0 && added > 0) { /* never changed: nothing to restore */
                        hosttune_originals_forget_irq(s->originals, irq);
                        save_originals(s, env);
                }
                char what[48];
                snprintf(what, sizeof what, "irq %d", irq);
                /* Some IRQs (timer, IPIs, managed queues) cannot move: -EIO is their normal answer. */
                if (log_failure || (r != -EIO && r != -EINVAL))
                        note_write(s, what, NULL, r);
        }
        cpuset_free(now);
        return r;
}

static void restore_irq(struct hosttune_state *s, const struct hosttune_env *env, int irq) {
        const char *list = hosttune_originals_irq(s->originals, irq);
        struct cpuset *cpus = NULL;
        if (!list || cpuset_parse(list, &cpus) < 0)
                return;
        char what[48];
        snprintf(what, sizeof what, "irq %d", irq);
        note_write(s, what, NULL, hosttune_fs_write_irq(env->root, irq, cpus));
        cpuset_free(cpus);
        hosttune_originals_forget_irq(s->originals, irq);
        save_originals(s, env);
}

static bool has_irq(const struct hosttune_vm *vms, size_t n, int irq) {
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < vms[i].n_irqs; j++)
                        if (vms[i].irqs[j] == irq)
                                return true;
        return false;
}

static void vms_free(struct hosttune_vm *vms, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(vms[i].cpus);
                free(vms[i].irqs);
        }
        free(vms);
}

/* The MSI IRQs of every passthrough device of vm, appended to out. */
static int vm_irqs(const struct hosttune_env *env, const struct vm *vm, struct hosttune_vm *out) {
        for (size_t i = 0; i < vm->n_hostpci; i++) {
                int *irqs = NULL;
                size_t n = 0;
                int r = hosttune_fs_pci_irqs(env->root, vm->hostpci[i], &irqs, &n);
                int *grown = r == 0 ? realloc(out->irqs, (out->n_irqs + n + 1) * sizeof *grown) : NULL;
                if (!grown) {
                        free(irqs);
                        return r < 0 ? r : -ENOMEM;
                }
                memcpy(grown + out->n_irqs, irqs, n * sizeof *irqs);
                out->irqs = grown;
                out->n_irqs += n;
                free(irqs);
        }
        return 0;
}

/* Steer the passthrough IRQs of every running VM with known CPUs onto them; IRQs of VMs gone get their
 * original affinity back. */
static void sync_vm_irqs(struct hosttune_state *s, const struct hosttune_env *env) {
        struct hosttune_vm *vms = calloc(env->inventory->n_vms + 1, sizeof *vms);
        size_t n = 0;
        for (size_t i = 0; vms && i < env->inventory->n_vms; i++) {
                const struct vm *vm = env->inventory->vms[i];
                const struct cpuset *cpus = vm_host_cpus(env, vm);
                if (!cpus || cpuset_is_empty(cpus) || vm->n_hostpci == 0)
                        continue;
                struct hosttune_vm *v = &vms[n++];
                v->vmid = vm->vmid;
                v->cpus = cpuset_format(cpus);
                if (vm_irqs(env, vm, v) < 0)
                        continue;
                for (size_t j = 0; j < v->n_irqs; j++)
                        steer_irq(s, env, v->irqs[j], cpus, true);
        }
        if (!vms)
                return;
        for (size_t i = 0; i < s->n_vms; i++)
                for (size_t j = 0; j < s->vms[i].n_irqs; j++)
                        if (!has_irq(vms, n, s->vms[i].irqs[j]))
                                restore_irq(s, env, s->vms[i].irqs[j]);
        vms_free(s->vms, s->n_vms);
        s->vms = vms;
        s->n_vms = n;
}

/* irqbalance would move the IRQs back: tell the operator once (per advice) what to set, as the seed's docs do. */
static void advise_irqbalance(struct hosttune_state *s, const struct cpuset *pinned) {
        _cleanup_free_ char *list = cpuset_format(pinned);
        char args[512] = "", *hint = NULL;
        size_t used = 0;
        for (size_t i = 0; i < s->n_vms; i++)
                for (size_t j = 0; j < s->vms[i].n_irqs && used < sizeof args - 32; j++)
                        used += (size_t)snprintf(args + used, sizeof args - used, "%s--banirq=%d", used ? " " : "",
                                                 s->vms[i].irqs[j]);
        if (!list || asprintf(&hint, "IRQBALANCE_BANNED_CPULIST=%s%s%s%s", list, used ? " IRQBALANCE_ARGS=\"" : "",
                              args, used ? "\"" : "") < 0)
                return;
        if (s->hint_logged && strcmp(s->hint_logged, hint) == 0) {
                free(hint);
                return;
        }
        log_warning("irqbalance runs and would move interrupts onto the pinned CPUs: set %s in /etc/default/irqbalance "
                    "and restart irqbalance", hint);
        free(s->hint_logged);
        s->hint_logged = hint;
}

/* Every IRQ that serves no VM: off the pinned CPUs, unless irqbalance runs (then advise). */
static void sync_other_irqs(struct hosttune_state *s, const struct hosttune_env *env, const struct cpuset *pinned) {
        s->irqbalance = hosttune_fs_irqbalance_running(env->root);
        s->irqs_off_pinned = 0;
        if (cpuset_is_empty(pinned))
                return;
        if (s->irqbalance) {
                advise_irqbalance(s, pinned);
                return;
        }
        int *irqs = NULL;
        size_t n = 0;
        if (hosttune_fs_irqs(env->root, &irqs, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct cpuset *now = NULL, *want = NULL;
                if (has_irq(s->vms, s->n_vms, irqs[i]) || hosttune_fs_read_irq(env->root, irqs[i], &now) < 0)
                        continue;
                int r = hosttune_irq_off_pinned(now, pinned, env->topology->online, &want);
                if (r > 0)
                        r = steer_irq(s, env, irqs[i], want, false);
                s->irqs_off_pinned += r == 0 && hosttune_originals_irq(s->originals, irqs[i]);
                cpuset_free(now);
                cpuset_free(want);
        }
        free(irqs);
}

/* ---- restoring ---- */

/* Write back every value of orig: governors before EPP. Returns how many writes failed (logged). */
static unsigned restore_all(const struct hosttune_env *env, const json_t *orig) {
        unsigned failed = 0;
        const char *key, *file;
        json_t *v, *val;
        json_object_foreach(json_object_get(orig, "cpus"), key, v) {
                unsigned cpu = (unsigned)strtoul(key, NULL, 10);
                const char *files[] = { HOSTTUNE_GOVERNOR, HOSTTUNE_EPP };
                for (int k = 0; k < 2; k++) {
                        const char *value = json_string_value(json_object_get(v, files[k]));
                        int r = value ? hosttune_fs_write_cpu(env->root, cpu, files[k], value) : 0;
                        if (r < 0 && !(r == -EBUSY && k == 1)) {
                                log_error("cannot restore cpu%u %s to %s: %s", cpu, files[k], value, strerror(-r));
                                failed++;
                        }
                }
        }
        json_object_foreach(json_object_get(orig, "irqs"), file, val) {
                struct cpuset *cpus = NULL;
                int r = cpuset_parse(json_string_value(val), &cpus);
                if (r == 0)
                        r = hosttune_fs_write_irq(env->root, atoi(file), cpus);
                cpuset_free(cpus);
                if (r < 0) {
                        log_error("cannot restore irq %s to %s: %s", file, json_string_value(val), strerror(-r));
                        failed++;
                }
        }
        return failed;
}

int hosttune_start(const struct hosttune_env *env) {
        char path[PATH_MAX];
        _cleanup_free_ char *text = NULL;
        int r = state_path(env, path, sizeof path);
        if (r == 0)
                r = fileio_read(path, STATE_MAX_BYTES, &text, NULL);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return log_error_errno(r, "cannot read %s; the host settings it keeps are not restored", path);
        _cleanup_(json_decrefp) json_t *orig = json_loads(text, 0, NULL);
        if (!hosttune_originals_valid(orig)) {
                log_error("%s is not a host-settings file; removing it without restoring anything", path);
        } else {
                unsigned failed = restore_all(env, orig);
                log_info("restored %zu host settings a previous run left changed (%u failed)",
                         hosttune_originals_count(orig), failed);
        }
        remove_state(env);
        return 0;
}

void hosttune_sync(struct hosttune_state *s, const struct hosttune_env *env) {
        s->pending = false;
        if (!env->topology || !env->inventory)
                return;
        if (!s->originals && !(s->originals = hosttune_originals_new()))
                return;
        if (!s->failing && !(s->failing = json_object()))
                return;
        struct cpuset *busy = busy_cpus(env);
        if (!busy)
                return;
        sync_governors(s, env, busy);
        if (env->irq_affinity) {
                sync_vm_irqs(s, env);
                sync_other_irqs(s, env, busy);
        }
        cpuset_free(busy);
}

void hosttune_stop(struct hosttune_state *s, const struct hosttune_env *env) {
        const json_t *orig = s->originals;
        if (!orig || hosttune_originals_count(orig) == 0)
                return;
        unsigned failed = restore_all(env, orig);
        log_info("restored %zu original host settings (%u failed)", hosttune_originals_count(orig), failed);
        json_decref(s->originals);
        s->originals = NULL;
        remove_state(env);
}

/* ---- showing it ---- */

static json_t *cpus_json(const struct hosttune_state *s) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < s->n_cpus; i++) {
                const struct hosttune_cpu *c = &s->cpus[i];
                json_array_append_new(arr, json_pack("{s:I, s:s, s:o, s:s}", "cpu", (json_int_t)c->cpu, "governor",
                                                     c->governor, "epp", *c->epp ? json_string(c->epp) : json_null(),
                                                     "role", hosttune_role_to_string(c->role)));
        }
        return arr;
}

static json_t *vms_json(const struct hosttune_state *s) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < s->n_vms; i++) {
                json_t *irqs = json_array();
                for (size_t j = 0; irqs && j < s->vms[i].n_irqs; j++)
                        json_array_append_new(irqs, json_integer(s->vms[i].irqs[j]));
                json_array_append_new(arr, json_pack("{s:i, s:s?, s:o*}", "vmid", s->vms[i].vmid, "cpus",
                                                     s->vms[i].cpus, "irqs", irqs));
        }
        return arr;
}

json_t *hosttune_json(const struct hosttune_state *s, const struct hosttune_env *env) {
        return json_pack("{s:b, s:b, s:b, s:I, s:o*, s:o*}", "cpu_governors", env->cpu_governors, "irq_affinity",
                         env->irq_affinity, "irqbalance", s->irqbalance, "irqs_off_pinned",
                         (json_int_t)s->irqs_off_pinned, "cpus", cpus_json(s), "vms", vms_json(s));
}

void hosttune_render_metrics(struct prom *p, const struct hosttune_state *s) {
        char v[16];
        prom_family(p, "pvescale_agent_cpu_governor", "gauge",
                    "The cpufreq governor of each online CPU that has one; the value is always 1.");
        for (size_t i = 0; i < s->n_cpus; i++) {
                struct prom_labels l = { 0 };
                snprintf(v, sizeof v, "%u", s->cpus[i].cpu);
                prom_labels_add(&l, "cpu", v);
                prom_labels_add(&l, "governor", s->cpus[i].governor);
                prom_sample_u64(p, "pvescale_agent_cpu_governor", l.text, 1);
        }
        prom_family(p, "pvescale_agent_vm_irqs", "gauge",
                    "MSI interrupts of a running VM's passthrough devices steered onto its CPUs (irq_affinity).");
        for (size_t i = 0; i < s->n_vms; i++) {
                struct prom_labels l = { 0 };
                snprintf(v, sizeof v, "%d", s->vms[i].vmid);
                prom_labels_add(&l, "vmid", v);
                prom_sample_u64(p, "pvescale_agent_vm_irqs", l.text, s->vms[i].n_irqs);
        }
        prom_gauge_u64(p, "pvescale_agent_irqs_off_pinned_cpus",
                       "Other interrupts the agent keeps off the CPUs pinned to VMs (irq_affinity, no irqbalance).",
                       s->irqs_off_pinned);
        prom_family(p, "pvescale_agent_host_tuning_writes_total", "counter",
                    "Governor, EPP and IRQ affinity values the agent wrote.");
        prom_sample_u64(p, "pvescale_agent_host_tuning_writes_total", NULL, s->writes);
        prom_family(p, "pvescale_agent_host_tuning_write_failures_total", "counter",
                    "Governor, EPP and IRQ affinity writes that failed.");
        prom_sample_u64(p, "pvescale_agent_host_tuning_write_failures_total", NULL, s->write_failures);
}

void hosttune_state_done(struct hosttune_state *s) {
        json_decref(s->originals);
        json_decref(s->failing);
        free(s->cpus);
        vms_free(s->vms, s->n_vms);
        free(s->hint_logged);
        memset(s, 0, sizeof *s);
}
