/* options: the controller's own flags (--launch, --leader-elect, --disruption, --node-repair, --workers, the
 * periods of the scale-down pass and the launch timeouts), taken out of argv before config. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OPTIONS_DEFAULT_WORKERS 64
#define OPTIONS_MAX_WORKERS 256
#define OPTIONS_DEFAULT_DISRUPTION_INTERVAL_MS 10000       /* Karpenter's disruption controller polls every 10 s */
#define OPTIONS_DEFAULT_GC_INTERVAL_MS 60000
#define OPTIONS_DEFAULT_NODE_REPAIR_AFTER_MS (15 * 60 * 1000)
#define OPTIONS_DEFAULT_REPLACEMENT_TIMEOUT_MS (10 * 60 * 1000)
#define OPTIONS_DEFAULT_CLONE_TIMEOUT_MS (10 * 60 * 1000)
#define OPTIONS_DEFAULT_REGISTRATION_TIMEOUT_MS (15 * 60 * 1000)
#define OPTIONS_DEFAULT_TASK_TIMEOUT_MS (2 * 60 * 1000)
/* client-go's leader election defaults (kube-controller-manager's --leader-elect-* flags) */
#define OPTIONS_DEFAULT_LEASE_DURATION_MS 15000
#define OPTIONS_DEFAULT_RENEW_DEADLINE_MS 10000
#define OPTIONS_DEFAULT_RETRY_PERIOD_MS 2000

struct options {
        bool launch;       /* --launch / LAUNCH (default true): false stops after NodeClaims are created */
        bool leader_elect; /* --leader-elect / LEADER_ELECT (default true) */
        bool disruption;   /* --disruption / DISRUPTION (default true): scale down (with --launch) */
        bool node_repair;  /* --node-repair / NODE_REPAIR (default false) */
        unsigned workers;  /* --workers / WORKERS (default 64): launcher worker threads */
        /* Durations in ms, Go syntax on the command line ("10s", "1m30s"), each from 100 ms to 24 h: */
        int64_t disruption_interval_ms;  /* --disruption-interval / DISRUPTION_INTERVAL (10s): the scale-down pass */
        int64_t gc_interval_ms;          /* --gc-interval / GC_INTERVAL (1m): garbage collection */
        int64_t node_repair_after_ms;    /* --node-repair-after / NODE_REPAIR_AFTER (15m): NotReady this long */
        int64_t replacement_timeout_ms;  /* --replacement-timeout / REPLACEMENT_TIMEOUT (10m): replacements not
                                          * Initialized by then drop their decision */
        int64_t clone_timeout_ms;        /* --clone-timeout / CLONE_TIMEOUT (10m): a longer clone fails the launch */
        int64_t registration_timeout_ms; /* --registration-timeout / REGISTRATION_TIMEOUT (15m): VM start to Node */
        int64_t task_timeout_ms;         /* --task-timeout / TASK_TIMEOUT (2m): other Proxmox tasks (start, stop...) */
        int64_t drain_timeout_ms;        /* --drain-timeout / DRAIN_TIMEOUT (0: none): the grace period of a node
                                          * whose claim and pool set no terminationGracePeriod */
        /* Leader election, as client-go's (lease duration > renew deadline > 1.2 x retry period): */
        int64_t lease_duration_ms; /* --leader-elect-lease-duration / LEADER_ELECT_LEASE_DURATION (15s): another
                                    * replica takes the Lease over this long after it last changed */
        int64_t renew_deadline_ms; /* --leader-elect-renew-deadline / LEADER_ELECT_RENEW_DEADLINE (10s): a leader
                                    * that could not renew for this long stops acting */
        int64_t retry_period_ms;   /* --leader-elect-retry-period / LEADER_ELECT_RETRY_PERIOD (2s): how often the
                                    * Lease is renewed or tried */
};

void options_init(struct options *o);

/* Apply the environment (LAUNCH, LEADER_ELECT, DISRUPTION, NODE_REPAIR, WORKERS and the durations'), then remove
 * the flags above from argv (in place, *argc updated) and apply them: "--launch", "--launch=false", "--launch false"
 * (the next argument is taken only when it is a boolean), "--workers 8", "--workers=8"; one leading dash works too.
 * Other arguments are left for config_load. Booleans: true/false/1/0/yes/no; durations: "30s", "2m", "1h30m". On a
 * bad value -EINVAL with "--flag: reason" (or "NAME: reason") in err. Pure. */
int options_parse(struct options *o, int *argc, char **argv, const char *const *envp, char *err, size_t errlen);

/* Help text for these flags (static). */
const char *options_usage(void);
