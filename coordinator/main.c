/* main: pvescale-coordinator: flags and config, the Kubernetes connection, the controller, the health and
 * metrics endpoints, and a clean stop on SIGTERM. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "config.h"
#include "controller.h"
#include "http_server.h"
#include "kube.h"
#include "log.h"
#include "main_launcher.h"
#include "options.h"
#include "prom.h"
#include "stats.h"

#define PROGRAM "pvescale-coordinator"
#define EXIT_USAGE 2
#define POLL_MAX_MS 1000

struct app {
        struct config cfg;
        struct options opts;
        struct kube_config kube;
        struct stats stats;
        struct controller *ctl;
        struct http_server *metrics, *health;
        int signal_fd;
};

static int usage_error(const char *msg) {
        fprintf(stderr, PROGRAM ": %s\n", msg);
        return EXIT_USAGE;
}

/* ---- endpoints ---- */

static void serve_health(struct app *a, const char *path, struct http_response *resp) {
        struct controller_status st;
        controller_get_status(a->ctl, &st);
        char body[256];
        if (strcmp(path, "/healthz") == 0 || strcmp(path, "/livez") == 0) {
                snprintf(body, sizeof body, "{\"status\": \"%s\"}\n", st.healthy ? "ok" : "stalled");
                http_response_set(resp, st.healthy ? 200 : 503, "application/json", body);
        } else {
                snprintf(body, sizeof body,
                         "{\"ready\": %s, \"leader\": %s, \"pending_pods\": %zu, \"nodeclaims\": %zu}\n",
                         st.ready ? "true" : "false", st.leader ? "true" : "false", st.pending_pods, st.nodeclaims);
                http_response_set(resp, st.ready ? 200 : 503, "application/json", body);
        }
}

static void handle(void *userdata, const struct http_request *req, struct http_response *resp) {
        struct app *a = userdata;
        bool get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
        if (get && strcmp(req->path, "/metrics") == 0) {
                struct stats_cluster cl = { 0 };
                if (controller_collect_gauges(a->ctl, &cl) < 0)
                        log_warning("/metrics: out of memory for the NodePools' gauges: left out");
                char *text = stats_render(&a->stats, &cl);
                stats_cluster_done(&cl);
                if (text)
                        http_response_take(resp, 200, PROM_CONTENT_TYPE, text);
                else
                        http_response_set(resp, 500, "application/json", "{\"error\": \"out of memory\"}\n");
        } else if (get && (strcmp(req->path, "/healthz") == 0 || strcmp(req->path, "/livez") == 0 ||
                           strcmp(req->path, "/readyz") == 0)) {
                serve_health(a, req->path, resp);
        } else {
                http_response_set(resp, get ? 404 : 405, "application/json",
                                  get ? "{\"error\": \"not found\"}\n" : "{\"error\": \"method not allowed\"}\n");
        }
}

static int listen_on(struct app *a, unsigned port, struct http_server **ret) {
        char err[256];
        struct http_server_options o = { .port = (uint16_t)port, .insecure_http = true, .max_body_bytes = 4096,
                                         .handler = handle, .userdata = a };
        int r = http_server_start(&o, ret, err, sizeof err);
        if (r < 0)
                log_error("port %u: %s", port, err);
        else
                log_info("listening on port %u (plain HTTP)", http_server_port(*ret));
        return r;
}

/* ---- start-up ---- */

static int load_kube(struct app *a, char *err, size_t errlen) {
        int r = a->cfg.kubeconfig ? kube_config_load_kubeconfig(a->cfg.kubeconfig, &a->kube, err, errlen)
                                  : kube_config_in_cluster(NULL, getenv("KUBERNETES_SERVICE_HOST"),
                                                           getenv("KUBERNETES_SERVICE_PORT"), &a->kube, err, errlen);
        if (r == 0 && (r = kube_config_files_from_data(&a->kube)) < 0)
                snprintf(err, errlen, "kubeconfig: cannot keep its certificates in memory files: %s", strerror(-r));
        return r;
}

/* Flags, environment, config file and Kubernetes connection settings. 0, 1 (help/version printed) or an exit
 * code. */
static int configure(struct app *a, int argc, char **argv, char **envp) {
        char err[1024];
        const char *const *env = (const char *const *)envp;
        options_init(&a->opts);
        if (options_parse(&a->opts, &argc, argv, env, err, sizeof err) < 0)
                return usage_error(err);
        int r = config_load(argc, argv, env, &a->cfg, err, sizeof err);
        if (r == CONFIG_HELP) {
                printf("%s\n%s", config_usage(), options_usage());
                return 1;
        }
        if (r == CONFIG_VERSION) {
                printf(PROGRAM " %s\n", PVESCALE_VERSION);
                return 1;
        }
        if (r < 0)
                return usage_error(err);
        log_set_level(a->cfg.log_level);
        log_set_format(a->cfg.log_format);
        if (load_kube(a, err, sizeof err) < 0)
                return usage_error(err);
        if (a->opts.launch && !main_launcher_ops())
                return usage_error("--launch: this build has no launcher (coordinator/launch/launcher.c); "
                                   "run with --launch=false");
        return 0;
}

static int block_signals(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0)
                return -errno;
        signal(SIGPIPE, SIG_IGN);
        int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? -errno : fd;
}

static int start(struct app *a) {
        struct controller_options co = { .launch = a->opts.launch, .leader_elect = a->opts.leader_elect,
                                         .disruption = a->opts.launch && a->opts.disruption,
                                         .node_repair = a->opts.node_repair, .workers = a->opts.workers,
                                         .disruption_interval_ms = a->opts.disruption_interval_ms,
                                         .gc_interval_ms = a->opts.gc_interval_ms,
                                         .node_repair_after_ms = a->opts.node_repair_after_ms,
                                         .replacement_timeout_ms = a->opts.replacement_timeout_ms,
                                         .lease_duration_ms = a->opts.lease_duration_ms,
                                         .renew_deadline_ms = a->opts.renew_deadline_ms,
                                         .retry_period_ms = a->opts.retry_period_ms,
                                         .launcher = { .clone_timeout_ms = a->opts.clone_timeout_ms,
                                                       .registration_timeout_ms = a->opts.registration_timeout_ms,
                                                       .task_timeout_ms = a->opts.task_timeout_ms,
                                                       .drain_timeout_ms = a->opts.drain_timeout_ms } };
        stats_init(&a->stats);
        a->signal_fd = block_signals(); /* before any thread starts, so that all inherit the mask */
        if (a->signal_fd < 0)
                return log_error_errno(a->signal_fd, "signalfd");
        if (listen_on(a, a->cfg.metrics_port, &a->metrics) < 0 || listen_on(a, a->cfg.health_port, &a->health) < 0)
                return -EADDRINUSE;
        int r = controller_new(&a->cfg, &a->kube, &co, main_launcher_ops(), &a->stats, &a->ctl);
        if (r == 0)
                r = controller_start(a->ctl);
        return r;
}

/* ---- the main thread: signals and the two HTTP servers ---- */

static int server_timeout(const struct http_server *s, int t) {
        int st = http_server_timeout_ms(s);
        return st >= 0 && st < t ? st : t;
}

static void serve_until_signal(struct app *a) {
        for (;;) {
                struct pollfd fds[3] = { { a->signal_fd, POLLIN, 0 },
                                         { http_server_fd(a->metrics), POLLIN, 0 },
                                         { http_server_fd(a->health), POLLIN, 0 } };
                int timeout = server_timeout(a->health, server_timeout(a->metrics, POLL_MAX_MS));
                if (poll(fds, 3, timeout) < 0 && errno != EINTR)
                        break;
                if (fds[0].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        if (read(a->signal_fd, &si, sizeof si) == sizeof si) {
                                log_info("signal %s: stopping", strsignal((int)si.ssi_signo));
                                return;
                        }
                }
                http_server_run(a->metrics);
                http_server_run(a->health);
        }
}

static void cleanup(struct app *a) {
        if (a->ctl)
                controller_stop(a->ctl);
        controller_free(a->ctl);
        http_server_free(a->metrics);
        http_server_free(a->health);
        if (a->signal_fd > 0)
                close(a->signal_fd);
        kube_config_done(&a->kube);
        config_done(&a->cfg);
}

int main(int argc, char **argv, char **envp) {
        static struct app app;
        log_setup(PROGRAM, LOG_LEVEL_INFO, 0);
        int r = configure(&app, argc, argv, envp);
        if (r != 0) {
                kube_config_done(&app.kube);
                config_done(&app.cfg);
                return r == 1 ? 0 : r;
        }
        r = start(&app);
        if (r == 0)
                serve_until_signal(&app);
        cleanup(&app);
        log_info("stopped");
        return r == 0 ? 0 : 1;
}
