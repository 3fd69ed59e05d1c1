/* options: the controller's own flags (--launch, --leader-elect, --disruption, --node-repair, --workers, the
 * periods of the scale-down pass, the launch timeouts and leader election's periods), taken out of argv before
 * config. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "options.h"
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boolword.h"

#define DURATION_MIN_MS 100
#define DURATION_MAX_MS (24LL * 3600 * 1000)

enum option_id {
        OPT_LAUNCH,
        OPT_LEADER_ELECT,
        OPT_DISRUPTION,
        OPT_NODE_REPAIR,
        OPT_WORKERS,
        OPT_DISRUPTION_INTERVAL,
        OPT_GC_INTERVAL,
        OPT_NODE_REPAIR_AFTER,
        OPT_REPLACEMENT_TIMEOUT,
        OPT_CLONE_TIMEOUT,
        OPT_REGISTRATION_TIMEOUT,
        OPT_TASK_TIMEOUT,
        OPT_DRAIN_TIMEOUT,
        OPT_LEASE_DURATION,
        OPT_RENEW_DEADLINE,
        OPT_RETRY_PERIOD,
};

enum option_kind { KIND_BOOL, KIND_COUNT, KIND_DURATION };

struct option_def {
        enum option_id id;
        const char *flag, *env;
        enum option_kind kind;
};

static const struct option_def DEFS[] = {
        { OPT_LAUNCH, "launch", "LAUNCH", KIND_BOOL },
        { OPT_LEADER_ELECT, "leader-elect", "LEADER_ELECT", KIND_BOOL },
        { OPT_DISRUPTION, "disruption", "DISRUPTION", KIND_BOOL },
        { OPT_NODE_REPAIR, "node-repair", "NODE_REPAIR", KIND_BOOL },
        { OPT_WORKERS, "workers", "WORKERS", KIND_COUNT },
        { OPT_DISRUPTION_INTERVAL, "disruption-interval", "DISRUPTION_INTERVAL", KIND_DURATION },
        { OPT_GC_INTERVAL, "gc-interval", "GC_INTERVAL", KIND_DURATION },
        { OPT_NODE_REPAIR_AFTER, "node-repair-after", "NODE_REPAIR_AFTER", KIND_DURATION },
        { OPT_REPLACEMENT_TIMEOUT, "replacement-timeout", "REPLACEMENT_TIMEOUT", KIND_DURATION },
        { OPT_CLONE_TIMEOUT, "clone-timeout", "CLONE_TIMEOUT", KIND_DURATION },
        { OPT_REGISTRATION_TIMEOUT, "registration-timeout", "REGISTRATION_TIMEOUT", KIND_DURATION },
        { OPT_TASK_TIMEOUT, "task-timeout", "TASK_TIMEOUT", KIND_DURATION },
        { OPT_DRAIN_TIMEOUT, "drain-timeout", "DRAIN_TIMEOUT", KIND_DURATION },
        { OPT_LEASE_DURATION, "leader-elect-lease-duration", "LEADER_ELECT_LEASE_DURATION", KIND_DURATION },
        { OPT_RENEW_DEADLINE, "leader-elect-renew-deadline", "LEADER_ELECT_RENEW_DEADLINE", KIND_DURATION },
        { OPT_RETRY_PERIOD, "leader-elect-retry-period", "LEADER_ELECT_RETRY_PERIOD", KIND_DURATION },
};

#define N_DEFS (sizeof DEFS / sizeof DEFS[0])

void options_init(struct options *o) {
        *o = (struct options){ .launch = true,
                               .leader_elect = true,
                               .disruption = true,
                               .workers = OPTIONS_DEFAULT_WORKERS,
                               .disruption_interval_ms = OPTIONS_DEFAULT_DISRUPTION_INTERVAL_MS,
                               .gc_interval_ms = OPTIONS_DEFAULT_GC_INTERVAL_MS,
                               .node_repair_after_ms = OPTIONS_DEFAULT_NODE_REPAIR_AFTER_MS,
                               .replacement_timeout_ms = OPTIONS_DEFAULT_REPLACEMENT_TIMEOUT_MS,
                               .clone_timeout_ms = OPTIONS_DEFAULT_CLONE_TIMEOUT_MS,
                               .registration_timeout_ms = OPTIONS_DEFAULT_REGISTRATION_TIMEOUT_MS,
                               .task_timeout_ms = OPTIONS_DEFAULT_TASK_TIMEOUT_MS,
                               .lease_duration_ms = OPTIONS_DEFAULT_LEASE_DURATION_MS,
                               .renew_deadline_ms = OPTIONS_DEFAULT_RENEW_DEADLINE_MS,
                               .retry_period_ms = OPTIONS_DEFAULT_RETRY_PERIOD_MS };
}

static int apply_bool(struct options *o, const struct option_def *d, const char *name, const char *value, char *err,
                      size_t errlen) {
        bool b;
        if (boolword_parse(value, &b) < 0) {
                snprintf(err, errlen, "%s: expected true or false (got \"%s\")", name, value);
                return -EINVAL;
        }
        bool *flags[] = { [OPT_LAUNCH] = &o->launch, [OPT_LEADER_ELECT] = &o->leader_elect,
                          [OPT_DISRUPTION] = &o->disruption, [OPT_NODE_REPAIR] = &o->node_repair };
        *flags[d->id] = b;
        return 0;
}

static int apply_count(struct options *o, const char *name, const char *value, char *err, size_t errlen) {
        char *end;
        long v = strtol(value, &end, 10);
        if (!*value || *end || v < 1 || v > OPTIONS_MAX_WORKERS) {
                snprintf(err, errlen, "%s: expected a number from 1 to %d (got \"%s\")", name, OPTIONS_MAX_WORKERS,
                         value);
                return -EINVAL;
        }
        o->workers = (unsigned)v;
        return 0;
}

static int apply_duration(struct options *o, const struct option_def *d, const char *name, const char *value,
                          char *err, size_t errlen) {
        uint64_t ms;
        if (config_parse_duration(value, &ms) < 0 || ms < DURATION_MIN_MS || ms > (uint64_t)DURATION_MAX_MS) {
                snprintf(err, errlen, "%s: expected a duration from 100ms to 24h such as 10s or 1m30s (got \"%s\")",
                         name, value);
                return -EINVAL;
        }
        int64_t *fields[] = { [OPT_DISRUPTION_INTERVAL] = &o->disruption_interval_ms,
                              [OPT_GC_INTERVAL] = &o->gc_interval_ms,
                              [OPT_NODE_REPAIR_AFTER] = &o->node_repair_after_ms,
                              [OPT_REPLACEMENT_TIMEOUT] = &o->replacement_timeout_ms,
                              [OPT_CLONE_TIMEOUT] = &o->clone_timeout_ms,
                              [OPT_REGISTRATION_TIMEOUT] = &o->registration_timeout_ms,
                              [OPT_TASK_TIMEOUT] = &o->task_timeout_ms,
                              [OPT_DRAIN_TIMEOUT] = &o->drain_timeout_ms,
                              [OPT_LEASE_DURATION] = &o->lease_duration_ms,
                              [OPT_RENEW_DEADLINE] = &o->renew_deadline_ms,
                              [OPT_RETRY_PERIOD] = &o->retry_period_ms };
        *fields[d->id] = (int64_t)ms;
        return 0;
}

static int apply(struct options *o, const struct option_def *d, const char *name, const char *value, char *err,
                 size_t errlen) {
        switch (d->kind) {
        case KIND_BOOL:
                return apply_bool(o, d, name, value, err, errlen);
        case KIND_COUNT:
                return apply_count(o, name, value, err, errlen);
        default:
                return apply_duration(o, d, name, value, err, errlen);
        }
}

/* The definition arg names ("--launch", "-launch=x"), or NULL; *ret_value: the text after '=' or NULL. */
static const struct option_def *match(const char *arg, const char **ret_value) {
        if (arg[0] != '-')
                return NULL;
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (size_t i = 0; i < N_DEFS; i++)
                if (strlen(DEFS[i].flag) == len && strncmp(DEFS[i].flag, name, len) == 0) {
                        *ret_value = eq ? eq + 1 : NULL;
                        return &DEFS[i];
                }
        return NULL;
}

/* Apply argv[*i]; *used = how many arguments it took. */
static int one_flag(struct options *o, const struct option_def *d, const char *value, int argc, char **argv, int i,
                    int *used, char *err, size_t errlen) {
        char name[64];
        bool b;
        snprintf(name, sizeof name, "--%s", d->flag);
        *used = 1;
        if (!value && d->kind == KIND_BOOL && i + 1 < argc && boolword_parse(argv[i + 1], &b) == 0) {
                value = argv[i + 1];
                *used = 2;
        } else if (!value && d->kind == KIND_BOOL) {
                value = "true";
        } else if (!value && i + 1 < argc) {
                value = argv[i + 1];
                *used = 2;
        } else if (!value) {
                snprintf(err, errlen, "%s: needs a value", name);
                return -EINVAL;
        }
        return apply(o, d, name, value, err, errlen);
}

/* client-go's rule: the lease outlasts the renew deadline, which outlasts 1.2 retry periods (its jitter). */
static int leader_periods_ok(const struct options *o, char *err, size_t errlen) {
        if (o->renew_deadline_ms >= o->lease_duration_ms)
                snprintf(err, errlen, "--leader-elect-renew-deadline: must be shorter than "
                         "--leader-elect-lease-duration (%lld ms, not %lld ms)", (long long)o->lease_duration_ms,
                         (long long)o->renew_deadline_ms);
        else if (o->retry_period_ms * 12 >= o->renew_deadline_ms * 10)
                snprintf(err, errlen, "--leader-elect-retry-period: must be shorter than "
                         "--leader-elect-renew-deadline / 1.2 (%lld ms, not %lld ms)", (long long)o->renew_deadline_ms,
                         (long long)o->retry_period_ms);
        else
                return 0;
        return -EINVAL;
}

int options_parse(struct options *o, int *argc, char **argv, const char *const *envp, char *err, size_t errlen) {
        for (size_t k = 0; k < N_DEFS; k++) {
                const char *v = config_env_value(envp, DEFS[k].env);
                if (v && *v && apply(o, &DEFS[k], DEFS[k].env, v, err, errlen) < 0)
                        return -EINVAL;
        }
        int out = 1;
        for (int i = 1; i < *argc;) {
                const char *value;
                const struct option_def *d = match(argv[i], &value);
                int used;
                if (!d) {
                        argv[out++] = argv[i++];
                        continue;
                }
                if (one_flag(o, d, value, *argc, argv, i, &used, err, errlen) < 0)
                        return -EINVAL;
                i += used;
        }
        argv[out] = NULL;
        *argc = out;
        return leader_periods_ok(o, err, errlen);
}

const char *options_usage(void) {
        return "Controller flags:\n"
               "  --launch[=BOOL]             [LAUNCH] launch VMs for NodeClaims (true); false stops after the claims\n"
               "                              are created (the launcher is not run)\n"
               "  --leader-elect[=BOOL]       [LEADER_ELECT] hold the Lease pvescale-coordinator before acting"
               " (true);\n"
               "                              the Lease lives in POD_NAMESPACE (else the kubeconfig's namespace) and\n"
               "                              the identity is POD_NAME (else the host name)\n"
               "  --disruption[=BOOL]         [DISRUPTION] scale down: delete or replace nodes that are empty,\n"
               "                              underused, drifted or expired, by the NodePools' disruption settings\n"
               "                              (true; needs --launch, whose finalizer drains and removes them)\n"
               "  --node-repair[=BOOL]        [NODE_REPAIR] replace nodes NotReady or Unknown for\n"
               "                              --node-repair-after (false)\n"
               "  --workers N                 [WORKERS] launcher worker threads (64)\n"
               "  --disruption-interval D     [DISRUPTION_INTERVAL] the scale-down pass's period (10s)\n"
               "  --gc-interval D             [GC_INTERVAL] garbage collection's period: VMs, ISOs and tokens no\n"
               "                              claim owns, claims whose VM or Node is gone (1m)\n"
               "  --node-repair-after D       [NODE_REPAIR_AFTER] with --node-repair: how long a node is NotReady or\n"
               "                              Unknown before it is replaced (15m)\n"
               "  --replacement-timeout D     [REPLACEMENT_TIMEOUT] a replace whose new nodes are not Initialized by\n"
               "                              then is dropped and the new claims deleted (10m)\n"
               "  --clone-timeout D           [CLONE_TIMEOUT] a clone that runs longer fails the launch (10m)\n"
               "  --registration-timeout D    [REGISTRATION_TIMEOUT] from the VM's start to its Node (15m)\n"
               "  --task-timeout D            [TASK_TIMEOUT] every other Proxmox task: config, resize, upload,\n"
               "                              start, stop, delete (2m)\n"
               "  --drain-timeout D           [DRAIN_TIMEOUT] the termination grace period of a node whose NodeClaim\n"
               "                              and NodePool set none: its pods left then are deleted (none: wait)\n"
               "  --leader-elect-lease-duration D  [LEADER_ELECT_LEASE_DURATION] another replica takes the Lease\n"
               "                              over this long after it last changed (15s)\n"
               "  --leader-elect-renew-deadline D  [LEADER_ELECT_RENEW_DEADLINE] a leader that cannot renew for\n"
               "                              this long stops acting (10s; shorter than the lease duration)\n"
               "  --leader-elect-retry-period D    [LEADER_ELECT_RETRY_PERIOD] how often the Lease is renewed or\n"
               "                              tried (2s; under the renew deadline / 1.2)\n"
               "  (D: a Go duration, 100ms to 24h: 500ms, 10s, 1m30s, 2h)\n";
}
