/* daemon: the agent's event loop (HTTPS API, inotify on the PVE dirs, signals, timers, QMP answers, sd_notify). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "http_server.h"
#include "log.h"
#include "monotime.h"

#define TICK_MS 500
#define TICKS_PER_S (1000 / TICK_MS)
#define MAX_EVENTS 16
/* A burst of PVE file changes (a clone, a config edit, a start: several files each) is read once: the inventory
 * is re-read when the directories have been quiet for REFRESH_QUIET_US, and at the latest REFRESH_MAX_US after
 * the first change of a steady stream. */
#define REFRESH_QUIET_US 20000
#define REFRESH_MAX_US 100000

enum { SRC_SIGNAL = 1, SRC_INOTIFY, SRC_TIMER, SRC_HTTP, SRC_PIN };

struct loop {
        struct agent *agent;
        struct http_server *http;
        int epoll_fd, signal_fd, inotify_fd, timer_fd;
        int watch_config, watch_run, watch_lxc, watch_cgroup;
        bool dirty, stop, watchdog;
        int64_t dirty_since_us, changed_us; /* the first and the last change since the last re-read */
        unsigned ticks;
};

static int add_fd(int epoll_fd, int fd, int tag) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)tag };
        return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int open_signals(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;
        int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? -errno : fd;
}

static int open_timer(void) {
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (fd < 0)
                return -errno;
        struct timespec tick = { .tv_nsec = TICK_MS * 1000000L };
        struct itimerspec its = { .it_interval = tick, .it_value = tick };
        if (timerfd_settime(fd, 0, &its, NULL) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* (Re)try to watch the PVE directories (VMs, their run files, containers) and the containers' cgroup directory;
 * they may appear after the agent starts. cgroupfs may not report a container's cgroup coming or going: the
 * safety rescan (rescan_interval) covers that. */
static void watch_dirs(struct loop *l) {
        const uint32_t mask = IN_CREATE | IN_DELETE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_MODIFY |
                              IN_DELETE_SELF | IN_MOVE_SELF;
        if (l->watch_config < 0)
                l->watch_config = inotify_add_watch(l->inotify_fd, l->agent->cfg.pve_config_dir, mask);
        if (l->watch_run < 0)
                l->watch_run = inotify_add_watch(l->inotify_fd, l->agent->cfg.pve_run_dir, mask);
        if (l->watch_lxc < 0 && *l->agent->cfg.pve_lxc_dir)
                l->watch_lxc = inotify_add_watch(l->inotify_fd, l->agent->cfg.pve_lxc_dir, mask);
        if (l->watch_cgroup < 0 && *l->agent->cfg.lxc_cgroup_dir)
                l->watch_cgroup = inotify_add_watch(l->inotify_fd, l->agent->cfg.lxc_cgroup_dir, mask);
}

static void mark_dirty(struct loop *l) {
        int64_t now = monotime_us();
        if (!l->dirty)
                l->dirty_since_us = now;
        l->changed_us = now;
        l->dirty = true;
}

/* Milliseconds until the inventory is due to be re-read: 0 now, -1 when nothing changed. */
static int refresh_due_ms(const struct loop *l) {
        if (!l->dirty)
                return -1;
        int64_t quiet = l->changed_us + REFRESH_QUIET_US, latest = l->dirty_since_us + REFRESH_MAX_US;
        int64_t left = (quiet < latest ? quiet : latest) - monotime_us();
        return left <= 0 ? 0 : (int)((left + 999) / 1000);
}

static void drain_inotify(struct loop *l) {
        char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n;
        while ((n = read(l->inotify_fd, buf, sizeof buf)) > 0) {
                for (char *p = buf; p < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *)p;
                        if (ev->mask & IN_IGNORED) {
                                if (ev->wd == l->watch_config)
                                        l->watch_config = -1;
                                if (ev->wd == l->watch_run)
                                        l->watch_run = -1;
                                if (ev->wd == l->watch_lxc)
                                        l->watch_lxc = -1;
                                if (ev->wd == l->watch_cgroup)
                                        l->watch_cgroup = -1;
                        }
                        p += sizeof *ev + ev->len;
                }
                mark_dirty(l);
        }
}

static void reload_topology(struct loop *l) {
        char err[512];
        sd_notify(0, "RELOADING=1\nSTATUS=Re-reading topology and node settings");
        if (agent_load_topology(l->agent, err, sizeof err) < 0 || agent_load_settings(l->agent, err, sizeof err) < 0)
                log_error("reload failed, keeping the previous state: %s", err);
        else
                log_info("topology and node settings re-read");
        mark_dirty(l);
        sd_notify(0, "READY=1");
}

static void handle_signals(struct loop *l) {
        struct signalfd_siginfo si;
        while (read(l->signal_fd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGHUP)
                        reload_topology(l);
                else
                        l->stop = true;
        }
}

/* The pin service with what it reads of the agent's state now. */
static void scan_pins(struct agent *a, enum pin_scan mode) {
        struct pin_env env = agent_pin_env(a);
        pin_service_scan(&a->pins, &env, mode);
}

static void pin_answers(struct agent *a) {
        struct pin_env env = agent_pin_env(a);
        pin_service_answers(&a->pins, &env);
}

static void refresh(struct loop *l) {
        l->dirty = false;
        int r = agent_refresh(l->agent);
        if (r < 0) {
                log_error_errno(r, "cannot read the VM inventory");
                return;
        }
        if (r > 0) {
                scan_pins(l->agent, PIN_SCAN_NEW); /* a VM (re)started: pin its new QEMU process */
                agent_tune_host(l->agent);                  /* and its cores' governors, its IRQs */
                char status[128];
                snprintf(status, sizeof status, "STATUS=Serving; %zu VMs, %u CPUs free", l->agent->inventory->n_vms,
                         l->agent->capacity->cpus_free);
                sd_notify(0, status);
                log_debug("inventory changed: %zu VMs", l->agent->inventory->n_vms);
        }
}

static bool every(const struct loop *l, unsigned seconds) {
        return l->ticks % ((seconds ? seconds : 1) * TICKS_PER_S) == 0;
}

static void handle_tick(struct loop *l) {
        uint64_t expirations;
        if (read(l->timer_fd, &expirations, sizeof expirations) < 0)
                return;
        l->ticks++;
        if (l->watchdog)
                sd_notify(0, "WATCHDOG=1");
        if (agent_expire(l->agent) < 0)
                log_error("cannot save the reservations after expiring some");
        agent_retry_ledger(l->agent);
        if (every(l, l->agent->cfg.rescan_interval_s)) {
                watch_dirs(l);
                mark_dirty(l); /* pmxcfs (FUSE) does not report edits made on other nodes */
        }
        if (every(l, l->agent->cfg.pin_interval_s)) {
                scan_pins(l->agent, PIN_SCAN_REPAIR);
                agent_tune_host(l->agent); /* governors and IRQs changed behind the agent's back */
        } else if (l->agent->pins.pending) {
                scan_pins(l->agent, PIN_SCAN_TICK);
        }
        if (l->agent->tune.pending)
                agent_tune_host(l->agent); /* a reservation was bound or released */
}

static void dispatch(struct loop *l, uint32_t tag) {
        if (tag == SRC_SIGNAL)
                handle_signals(l);
        else if (tag == SRC_INOTIFY)
                drain_inotify(l);
        else if (tag == SRC_TIMER)
                handle_tick(l);
        else if (tag == SRC_HTTP && http_server_run(l->http) < 0)
                log_error("HTTP server processing failed");
        else if (tag == SRC_PIN)
                pin_answers(l->agent); /* QMP answered on the worker thread: pin with its answers */
}

static int loop_iterate(struct loop *l) {
        struct epoll_event events[MAX_EVENTS];
        int timeout = http_server_timeout_ms(l->http), due = refresh_due_ms(l);
        if (due >= 0 && (timeout < 0 || due < timeout))
                timeout = due;
        int n = epoll_wait(l->epoll_fd, events, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR)
                return -errno;
        for (int i = 0; i < n; i++)
                dispatch(l, events[i].data.u32);
        if (n == 0)
                http_server_run(l->http);
        if (refresh_due_ms(l) == 0)
                refresh(l);
        return 0;
}

static int start_http(struct loop *l) {
        struct agent_config *c = &l->agent->cfg;
        struct http_server_options o = {
                .bind_address = c->bind_address,
                .port = (uint16_t)c->port,
                .cert_file = c->tls_cert,
                .key_file = c->tls_key,
                .insecure_http = c->insecure_http,
                .handler = api_handle,
                .userdata = l->agent,
        };
        char err[512];
        int r = http_server_start(&o, &l->http, err, sizeof err);
        if (r < 0) {
                log_error("%s", err); /* the message says why, errno text included where it helps */
                return r;
        }
        log_info("listening on port %u (%s; at most %u connections, %u from one address)", http_server_port(l->http),
                 c->insecure_http ? "plain HTTP" : "HTTPS", http_server_max_connections(l->http),
                 HTTP_SERVER_MAX_PER_IP);
        return 0;
}

static int add_sources(struct loop *l) {
        int r = add_fd(l->epoll_fd, l->signal_fd, SRC_SIGNAL);
        if (r == 0)
                r = add_fd(l->epoll_fd, l->inotify_fd, SRC_INOTIFY);
        if (r == 0)
                r = add_fd(l->epoll_fd, l->timer_fd, SRC_TIMER);
        if (r == 0)
                r = add_fd(l->epoll_fd, http_server_fd(l->http), SRC_HTTP);
        if (r == 0)
                r = add_fd(l->epoll_fd, pin_service_fd(&l->agent->pins), SRC_PIN);
        return r < 0 ? log_error_errno(r, "epoll setup failed") : 0;
}

static int loop_open(struct loop *l) {
        int r = start_http(l);
        if (r < 0)
                return r;
        l->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        l->signal_fd = open_signals();
        l->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        l->timer_fd = open_timer();
        if (l->epoll_fd < 0 || l->signal_fd < 0 || l->inotify_fd < 0 || l->timer_fd < 0)
                return log_error_errno(-EMFILE, "cannot create the event loop file descriptors");
        watch_dirs(l);
        mark_dirty(l); /* a config written between the first read (agent_load_all) and the watches is read now */
        r = pin_service_start(&l->agent->pins);
        if (r < 0)
                return log_error_errno(r, "cannot start the QMP worker thread");
        return add_sources(l);
}

static void loop_close(struct loop *l) {
        pin_service_stop(&l->agent->pins);
        http_server_free(l->http);
        int fds[] = { l->epoll_fd, l->signal_fd, l->inotify_fd, l->timer_fd };
        for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

int daemon_run(struct agent *a) {
        struct loop l = { .agent = a, .epoll_fd = -1, .signal_fd = -1, .inotify_fd = -1, .timer_fd = -1,
                          .watch_config = -1, .watch_run = -1, .watch_lxc = -1, .watch_cgroup = -1 };
        uint64_t usec = 0;
        l.watchdog = sd_watchdog_enabled(0, &usec) > 0;
        struct hosttune_env tune = agent_hosttune_env(a);
        int r = loop_open(&l);
        if (r == 0) {
                hosttune_start(&tune); /* what a crashed run left changed, first */
                scan_pins(a, PIN_SCAN_REPAIR);
                agent_tune_host(a);
                sd_notifyf(0, "READY=1\nSTATUS=Serving; %zu VMs, %u CPUs free\nMAINPID=%d", a->inventory->n_vms,
                           a->capacity->cpus_free, (int)getpid());
                log_info("ready: node %s, region %s, %zu VMs", a->cfg.node_name, a->cfg.region, a->inventory->n_vms);
        }
        while (r == 0 && !l.stop)
                r = loop_iterate(&l);
        sd_notify(0, "STOPPING=1\nSTATUS=Stopping");
        tune = agent_hosttune_env(a); /* the state now */
        hosttune_stop(&a->tune, &tune);
        loop_close(&l);
        if (r < 0 && r != -EMFILE)
                log_error_errno(r, "event loop failed");
        return r;
}
