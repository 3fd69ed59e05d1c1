/* Tests for agent/hosttune: governors and IRQ affinity written into a writable copy of a captured sysfs tree,
 * restored at stop and after a crash, and shown in /metrics and the capacity document. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent.h"
#include "hosttune.h"
#include "metrics.h"
#include "testutil.h"

#define TREE "32intel64-2p8co2t+8ve" /* 2 sockets, 16 cores, CPUs 0-31 (SMT siblings n and n+16) */
#define VM_CPUS "4-5,20-21"
#define RESERVED_CPU 0
#define EPP10 "/sys/devices/system/cpu/cpu10/cpufreq/energy_performance_preference"

struct fixture {
        char tmp[256], root[512];
        struct agent a;
};

static void sh(const char *fmtstr, ...) {
        char cmd[4096];
        va_list ap;
        va_start(ap, fmtstr);
        vsnprintf(cmd, sizeof cmd, fmtstr, ap);
        va_end(ap);
        if (system(cmd) != 0)
                fail_msg("command failed: %s", cmd);
}

/* Write "<text>\n" to <root><rel>, making its directories (no shell: a setup writes ~80 files). */
static void put(const struct fixture *f, const char *rel, const char *text) {
        char path[1024];
        snprintf(path, sizeof path, "%s%s", f->root, rel);
        for (char *p = path + strlen(f->root) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                if (mkdir(path, 0755) < 0 && errno != EEXIST)
                        fail_msg("mkdir %s: %s", path, strerror(errno));
                *p = '/';
        }
        FILE *fp = fopen(path, "w");
        if (!fp)
                fail_msg("cannot write %s: %s", path, strerror(errno));
        fprintf(fp, "%s\n", text);
        fclose(fp);
}

/* The file's text without its newline, or "" when missing. */
static const char *get(const struct fixture *f, const char *rel) {
        static char buf[256];
        char path[1024];
        snprintf(path, sizeof path, "%s%s", f->root, rel);
        FILE *fp = fopen(path, "r");
        buf[0] = '\0';
        if (fp) {
                if (!fgets(buf, sizeof buf, fp))
                        buf[0] = '\0';
                fclose(fp);
        }
        buf[strcspn(buf, "\n")] = '\0';
        return buf;
}

static const char *cpu_file(const struct fixture *f, unsigned cpu, const char *file) {
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/%s", cpu, file);
        return get(f, rel);
}

static const char *irq_file(const struct fixture *f, int irq) {
        char rel[64];
        snprintf(rel, sizeof rel, "/proc/irq/%d/smp_affinity_list", irq);
        return get(f, rel);
}

static bool state_file_exists(const struct fixture *f) {
        char path[512];
        snprintf(path, sizeof path, "%s/state/%s", f->tmp, HOSTTUNE_STATE_FILE);
        return access(path, F_OK) == 0;
}

/* Every CPU gets cpufreq (schedutil, EPP on even CPUs only); a passthrough NIC with two functions and MSI IRQs
 * 40, 41 (function 0) and 42 (function 1); other IRQs 0 (all CPUs), 9 (CPU 4 only), 50 (CPUs 8-11). */
static void make_tree(struct fixture *f) {
        char path[1024];
        snprintf(path, sizeof path, "%s" EPP10, f->root);
        unlink(path); /* the symlink of test_failed_write_is_counted_and_not_restored */
        snprintf(path, sizeof path, "%s/proc/4242/comm", f->root);
        unlink(path);
        snprintf(path, sizeof path, "%s/state/%s", f->tmp, HOSTTUNE_STATE_FILE);
        unlink(path);
        for (unsigned cpu = 0; cpu < 32; cpu++) {
                char rel[128];
                snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/scaling_governor", cpu);
                put(f, rel, "schedutil");
                snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/energy_performance_preference", cpu);
                if (cpu % 2 == 0)
                        put(f, rel, "balance_performance");
        }
        /* Two shared cpufreq policies: CPUs 5 and 6 (5 is the VM's: both busy), CPUs 0 and 1 (0 is the host's:
         * both left alone). */
        put(f, "/sys/devices/system/cpu/cpu5/cpufreq/affected_cpus", "5 6");
        put(f, "/sys/devices/system/cpu/cpu6/cpufreq/affected_cpus", "5 6");
        put(f, "/sys/devices/system/cpu/cpu0/cpufreq/affected_cpus", "0 1");
        put(f, "/sys/devices/system/cpu/cpu1/cpufreq/affected_cpus", "0 1");
        const char *msi[] = { "0000:af:00.0/msi_irqs/40", "0000:af:00.0/msi_irqs/41", "0000:af:00.1/msi_irqs/42" };
        for (size_t i = 0; i < 3; i++) {
                char rel[128];
                snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s", msi[i]);
                put(f, rel, "msi");
        }
        const char *irqs[][2] = { { "0", "0-31" }, { "9", "4" }, { "40", "0-31" }, { "41", "0-31" },
                                  { "42", "0-31" }, { "50", "8-11" } };
        for (size_t i = 0; i < 6; i++) {
                char rel[64];
                snprintf(rel, sizeof rel, "/proc/irq/%s/smp_affinity_list", irqs[i][0]);
                put(f, rel, irqs[i][1]);
        }
}

/* An agent over the tree: CPU 0 reserved for the host, VM 101 running on VM_CPUS with the NIC (short
 * slot form: both functions), VM 102 stopped. */
/* Host tuning as the daemon calls it: with what it reads of the agent's state now. */
static void sync_host(struct agent *a) {
        struct hosttune_env env = agent_hosttune_env(a);
        hosttune_sync(&a->tune, &env);
}

static void stop_host(struct agent *a) {
        struct hosttune_env env = agent_hosttune_env(a);
        hosttune_stop(&a->tune, &env);
}

static int start_host(const struct agent *a) {
        struct hosttune_env env = agent_hosttune_env(a);
        return hosttune_start(&env);
}

static void make_agent(struct fixture *f, bool governors, bool irqs) {
        struct agent *a = &f->a;
        char err[512] = "";
        assert_int_equal(agent_config_defaults(&a->cfg), 0);
        assert_int_equal(agent_config_set(&a->cfg, "fsroot", f->root, err, sizeof err), 0);
        char state[512];
        snprintf(state, sizeof state, "%s/state", f->tmp);
        assert_int_equal(agent_config_set(&a->cfg, "state_dir", state, err, sizeof err), 0);
        a->cfg.cpu_governors = governors;
        a->cfg.irq_affinity = irqs;
        if (agent_load_topology(a, err, sizeof err) < 0)
                fail_msg("topology: %s", err);
        a->settings = node_settings_new_empty();
        assert_non_null(a->settings);
        assert_int_equal(cpuset_set(a->settings->reserved_cpus, RESERVED_CPU), 0);
        a->ledger = ledger_new();
        a->inventory = calloc(1, sizeof *a->inventory);
        a->inventory->vms = calloc(2, sizeof *a->inventory->vms);
        assert_int_equal(inventory_parse_config(101, "cores: 4\naffinity: " VM_CPUS "\nhostpci0: af:00,pcie=1\n",
                                                &a->inventory->vms[0]), 0);
        assert_int_equal(inventory_parse_config(102, "cores: 2\naffinity: 8-9\n", &a->inventory->vms[1]), 0);
        a->inventory->n_vms = 2;
        a->inventory->vms[0]->running = true;
        a->inventory->vms[0]->pid = 1;
}

/* One extraction of the tree for the whole run (it takes seconds on a busy machine); each case writes the
 * files it looks at afresh. */
static int group_setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        const char *shared = getenv("PVESCALE_SHARED");
        assert_non_null(shared);
        snprintf(f->tmp, sizeof f->tmp, "/tmp/test-hosttune-XXXXXX");
        assert_non_null(mkdtemp(f->tmp));
        sh("tar xjf '%s/topologies/%s.tar.bz2' -C '%s' && mkdir -p '%s/state'", shared, TREE, f->tmp, f->tmp);
        snprintf(f->root, sizeof f->root, "%s/%s", f->tmp, TREE);
        *state = f;
        return 0;
}

static int group_teardown(void **state) {
        struct fixture *f = *state;
        test_rmtree(f->tmp);
        free(f);
        return 0;
}

static int setup(void **state) {
        make_tree(*state);
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        agent_done(&f->a);
        return 0;
}

/* ---- governors ---- */

static void test_governors_follow_pinning_and_are_restored(void **state) {
        struct fixture *f = *state;
        make_agent(f, true, false);
        sync_host(&f->a);
        assert_string_equal(cpu_file(f, 4, "scaling_governor"), "performance");
        assert_string_equal(cpu_file(f, 4, "energy_performance_preference"), "performance");
        assert_string_equal(cpu_file(f, 21, "scaling_governor"), "performance");
        assert_string_equal(cpu_file(f, 6, "scaling_governor"), "performance"); /* its policy has CPU 5 */
        assert_string_equal(cpu_file(f, 1, "scaling_governor"), "schedutil");   /* its policy has CPU 0 */
        assert_string_equal(cpu_file(f, 10, "scaling_governor"), "powersave");
        assert_string_equal(cpu_file(f, 10, "energy_performance_preference"), "power");
        assert_string_equal(cpu_file(f, 7, "energy_performance_preference"), ""); /* no EPP file: none made */
        assert_string_equal(cpu_file(f, 8, "scaling_governor"), "powersave");     /* VM 102 is stopped */
        assert_string_equal(cpu_file(f, RESERVED_CPU, "scaling_governor"), "schedutil");
        assert_true(state_file_exists(f));
        /* VM 101 stops: its cores are free now. */
        f->a.inventory->vms[0]->running = false;
        sync_host(&f->a);
        assert_string_equal(cpu_file(f, 4, "scaling_governor"), "powersave");
        assert_string_equal(cpu_file(f, 4, "energy_performance_preference"), "power");
        assert_string_equal(cpu_file(f, 6, "scaling_governor"), "powersave");
        stop_host(&f->a);
        for (unsigned cpu = 0; cpu < 32; cpu++)
                assert_string_equal(cpu_file(f, cpu, "scaling_governor"), "schedutil");
        assert_string_equal(cpu_file(f, 4, "energy_performance_preference"), "balance_performance");
        assert_false(state_file_exists(f));
}

/* A file that cannot be written (a read-only sysctl here: EACCES even for root) is counted, logged once for
 * its cause, and its value is not "restored" later. */
static void test_failed_write_is_counted_and_not_restored(void **state) {
        struct fixture *f = *state;
        char path[1024];
        snprintf(path, sizeof path, "%s" EPP10, f->root);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink("/proc/sys/kernel/ostype", path), 0);
        make_agent(f, true, false);
        sync_host(&f->a);
        assert_string_equal(cpu_file(f, 10, "scaling_governor"), "powersave");
        assert_int_equal(f->a.tune.write_failures, 1);
        /* The governors of CPUs 2-31 and the EPP of the even ones among them, but not CPU 10's EPP. */
        assert_int_equal(hosttune_originals_count(f->a.tune.originals), 30 + 15 - 1);
        sync_host(&f->a); /* tried again, still failing, logged once */
        assert_int_equal(f->a.tune.write_failures, 2);
        assert_int_equal(json_object_size(f->a.tune.failing), 1);
        stop_host(&f->a);
        assert_string_equal(cpu_file(f, 10, "scaling_governor"), "schedutil");
        assert_false(state_file_exists(f));
}

static void test_governors_off_changes_nothing_but_reads(void **state) {
        struct fixture *f = *state;
        make_agent(f, false, false);
        sync_host(&f->a);
        assert_string_equal(cpu_file(f, 4, "scaling_governor"), "schedutil");
        assert_false(state_file_exists(f));
        assert_int_equal(f->a.tune.n_cpus, 32);
        assert_string_equal(f->a.tune.cpus[4].governor, "schedutil");
}

/* A crash leaves hosttune.json: the next start (feature on or off) writes the originals back. */
static void test_crash_leftovers_are_restored_at_start(void **state) {
        struct fixture *f = *state;
        make_agent(f, true, true);
        sync_host(&f->a);
        assert_string_equal(cpu_file(f, 5, "scaling_governor"), "performance");
        assert_string_equal(irq_file(f, 40), VM_CPUS);
        hosttune_state_done(&f->a.tune); /* the crash: nothing restored */
        agent_done(&f->a);
        make_agent(f, false, false);
        assert_int_equal(start_host(&f->a), 0);
        assert_string_equal(cpu_file(f, 5, "scaling_governor"), "schedutil");
        assert_string_equal(cpu_file(f, 6, "energy_performance_preference"), "balance_performance");
        assert_string_equal(irq_file(f, 40), "0-31");
        assert_string_equal(irq_file(f, 9), "4");
        assert_false(state_file_exists(f));
}

/* ---- IRQs ---- */

static void test_irqs_follow_the_vm_and_others_stay_off(void **state) {
        struct fixture *f = *state;
        make_agent(f, false, true);
        sync_host(&f->a);
        assert_string_equal(irq_file(f, 40), VM_CPUS);
        assert_string_equal(irq_file(f, 41), VM_CPUS);
        assert_string_equal(irq_file(f, 42), VM_CPUS);     /* function 1 of the slot too */
        assert_string_equal(irq_file(f, 0), "0-3,6-19,22-31"); /* the pinned CPUs taken out */
        assert_string_equal(irq_file(f, 9), "0-3,6-19,22-31"); /* only on a pinned CPU: every other CPU */
        assert_string_equal(irq_file(f, 50), "8-11");           /* already off them */
        assert_int_equal(f->a.tune.n_vms, 1);
        assert_int_equal(f->a.tune.vms[0].n_irqs, 3);
        assert_int_equal(f->a.tune.irqs_off_pinned, 2);
        /* The VM stops: its IRQs get their original affinity back. */
        f->a.inventory->vms[0]->running = false;
        sync_host(&f->a);
        assert_string_equal(irq_file(f, 40), "0-31");
        assert_int_equal(f->a.tune.n_vms, 0);
        stop_host(&f->a);
        assert_string_equal(irq_file(f, 0), "0-31");
        assert_string_equal(irq_file(f, 9), "4");
        assert_false(state_file_exists(f));
}

static void test_irqbalance_running_leaves_other_irqs(void **state) {
        struct fixture *f = *state;
        put(f, "/proc/4242/comm", "irqbalance");
        make_agent(f, false, true);
        sync_host(&f->a);
        assert_true(f->a.tune.irqbalance);
        assert_string_equal(irq_file(f, 40), VM_CPUS); /* the VM's own IRQs still follow it */
        assert_string_equal(irq_file(f, 0), "0-31");
        assert_string_equal(irq_file(f, 9), "4");
        assert_non_null(f->a.tune.hint_logged);
        assert_non_null(strstr(f->a.tune.hint_logged, "IRQBALANCE_BANNED_CPULIST=" VM_CPUS));
        assert_non_null(strstr(f->a.tune.hint_logged, "--banirq=40 --banirq=41 --banirq=42"));
}

/* ---- shown in /metrics and the capacity document ---- */

static void test_metrics_and_document_show_governors_and_irqs(void **state) {
        struct fixture *f = *state;
        make_agent(f, true, true);
        assert_int_equal(ledger_effective_capacity(f->a.ledger, f->a.topology, f->a.settings, f->a.inventory,
                                                   &(struct capacity_options){ 0 }, &f->a.capacity), 0);
        sync_host(&f->a);
        struct metrics m = { 0 };
        struct metrics_view view = agent_metrics_view(&f->a);
        char *text = metrics_render(&m, &view);
        assert_non_null(text);
        assert_non_null(strstr(text, "pvescale_agent_cpu_governor{cpu=\"4\",governor=\"performance\"} 1\n"));
        assert_non_null(strstr(text, "pvescale_agent_cpu_governor{cpu=\"10\",governor=\"powersave\"} 1\n"));
        assert_non_null(strstr(text, "pvescale_agent_cpu_governor{cpu=\"0\",governor=\"schedutil\"} 1\n"));
        assert_non_null(strstr(text, "pvescale_agent_vm_irqs{vmid=\"101\"} 3\n"));
        assert_non_null(strstr(text, "pvescale_agent_irqs_off_pinned_cpus 2\n"));
        free(text);
        json_t *doc = agent_capacity_json(&f->a), *ht = json_object_get(doc, "host_tuning");
        assert_non_null(ht);
        json_t *cpu4 = json_array_get(json_object_get(ht, "cpus"), 4);
        assert_string_equal(json_string_value(json_object_get(cpu4, "governor")), "performance");
        assert_string_equal(json_string_value(json_object_get(cpu4, "role")), "busy");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(ht, "cpus"), 0), "role")),
                            "reserved");
        json_t *vm = json_array_get(json_object_get(ht, "vms"), 0);
        assert_int_equal(json_integer_value(json_object_get(vm, "vmid")), 101);
        assert_string_equal(json_string_value(json_object_get(vm, "cpus")), VM_CPUS);
        assert_int_equal(json_array_size(json_object_get(vm, "irqs")), 3);
        json_decref(doc);
        stop_host(&f->a);
}

/* ---- pure parts ---- */

static void test_irq_off_pinned(void **state) {
        (void)state; /* the group's tree is not used */
        struct cpuset *cur, *pinned, *online, *want = NULL;
        assert_int_equal(cpuset_parse("0-7", &online), 0);
        assert_int_equal(cpuset_parse("2-3", &pinned), 0);
        assert_int_equal(cpuset_parse("4-5", &cur), 0);
        assert_int_equal(hosttune_irq_off_pinned(cur, pinned, online, &want), 0);
        cpuset_free(cur);
        assert_int_equal(cpuset_parse("3-4", &cur), 0);
        assert_int_equal(hosttune_irq_off_pinned(cur, pinned, online, &want), 1);
        char *s = cpuset_format(want);
        assert_string_equal(s, "4");
        free(s);
        cpuset_free(want);
        cpuset_free(pinned);
        assert_int_equal(cpuset_parse("0-7", &pinned), 0); /* everything pinned: it stays */
        assert_int_equal(hosttune_irq_off_pinned(cur, pinned, online, &want), 0);
        cpuset_free(cur);
        cpuset_free(pinned);
        cpuset_free(online);
}

static void test_originals_keep_the_first_value(void **state) {
        (void)state;
        json_t *o = hosttune_originals_new();
        assert_int_equal(hosttune_originals_note_cpu(o, 3, HOSTTUNE_GOVERNOR, "schedutil"), 1);
        assert_int_equal(hosttune_originals_note_cpu(o, 3, HOSTTUNE_GOVERNOR, "powersave"), 0);
        assert_int_equal(hosttune_originals_note_cpu(o, 3, HOSTTUNE_EPP, "balance_power"), 1);
        assert_true(hosttune_originals_valid(o));
        assert_int_equal(hosttune_originals_count(o), 2);
        assert_string_equal(
                json_string_value(json_object_get(json_object_get(json_object_get(o, "cpus"), "3"), HOSTTUNE_GOVERNOR)),
                "schedutil");
        json_decref(o);
        json_t *bad = test_json_parse("{\"cpus\": {\"3\": 1}, \"irqs\": {}}");
        assert_false(hosttune_originals_valid(bad));
        json_decref(bad);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_governors_follow_pinning_and_are_restored, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_write_is_counted_and_not_restored, setup, teardown),
                cmocka_unit_test_setup_teardown(test_governors_off_changes_nothing_but_reads, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_leftovers_are_restored_at_start, setup, teardown),
                cmocka_unit_test_setup_teardown(test_irqs_follow_the_vm_and_others_stay_off, setup, teardown),
                cmocka_unit_test_setup_teardown(test_irqbalance_running_leaves_other_irqs, setup, teardown),
                cmocka_unit_test_setup_teardown(test_metrics_and_document_show_governors_and_irqs, setup, teardown),
                cmocka_unit_test(test_irq_off_pinned),
                cmocka_unit_test(test_originals_keep_the_first_value),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
