/* fuzz_agent: the in-process agent and loopback client the agent targets share (see fuzz_agent.h). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fuzz_agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "api.h"
#include "fuzz.h"
#include "http_server.h"
#include "ledger.h"

#define EXCHANGE_DEADLINE_MS 2000
/* After the whole request is sent, a connection quiet this long is done: libmicrohttpd (epoll, edge-triggered) may
 * not notice a half-close while it waits for a keep-alive request, and the answers come within a millisecond. */
#define EXCHANGE_QUIET_MS 3

static struct agent agent;
static struct http_server *server;

static void must(int r, const char *what, const char *err) {
        if (r < 0) {
                fprintf(stderr, "fuzz_agent: %s: %s\n", what, err && *err ? err : strerror(-r));
                abort();
        }
}

static void configure(struct agent_config *c, const char *dir) {
        char err[512] = "", xml[4096];
        snprintf(xml, sizeof xml, "%s/topologies/eas-tioga.xml", fuzz_shared_dir());
        static const char *const keys[][2] = {
                { "node_name", "pve1" }, { "region", "default" }, { "node_policy", "static" },
                { "node_setting_file", "" }, { "insecure_http", "true" }, { "bind_address", "127.0.0.1" },
        };
        must(agent_config_defaults(c), "defaults", NULL);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                must(agent_config_set(c, keys[i][0], keys[i][1], err, sizeof err), keys[i][0], err);
        must(agent_config_set(c, "topology_xml", xml, err, sizeof err), "topology_xml", err);
        must(agent_config_set(c, "pve_config_dir", dir, err, sizeof err), "pve_config_dir", err);
        must(agent_config_set(c, "pve_run_dir", dir, err, sizeof err), "pve_run_dir", err);
        must(agent_config_set(c, "pve_lxc_dir", dir, err, sizeof err), "pve_lxc_dir", err);
        must(agent_config_set(c, "lxc_cgroup_dir", dir, err, sizeof err), "lxc_cgroup_dir", err);
        must(agent_config_set(c, "state_dir", dir, err, sizeof err), "state_dir", err);
}

void fuzz_agent_setup(void) {
        if (server)
                return;
        fuzz_quiet();
        static char dir[] = "/tmp/pvescale-fuzz-agent-XXXXXX";
        if (!mkdtemp(dir))
                must(-errno, "mkdtemp", NULL);
        char err[512] = "";
        configure(&agent.cfg, dir);
        must(agent_load_all(&agent, err, sizeof err), "load", err);
        agent.token = strdup(FUZZ_AGENT_TOKEN);
        struct http_server_options o = {
                .bind_address = "127.0.0.1",
                .insecure_http = true,
                .max_body_bytes = 1 << 20,
                .handler = api_handle,
                .userdata = &agent,
        };
        must(http_server_start(&o, &server, err, sizeof err), "listen", err);
}

void fuzz_agent_reset(void) {
        ledger_free(agent.ledger);
        agent.ledger = ledger_new();
        if (!agent.ledger || agent_ledger_changed(&agent) < 0)
                abort();
}

static int connect_loopback(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(http_server_port(server)) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS))
                abort();
        return fd;
}

static long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Write what is left of the request when the socket takes it; half-close after the last byte. */
static void pump_out(int fd, const char *buf, size_t len, size_t *sent) {
        while (*sent < len) {
                ssize_t n = send(fd, buf + *sent, len - *sent, MSG_NOSIGNAL);
                if (n <= 0)
                        return;
                *sent += (size_t)n;
        }
        shutdown(fd, SHUT_WR);
        *sent = len + 1;
}

size_t fuzz_agent_exchange(const void *request, size_t len) {
        int fd = connect_loopback();
        size_t sent = 0, got = 0;
        char buf[16384];
        long deadline = now_ms() + EXCHANGE_DEADLINE_MS, last = now_ms();
        for (bool open = true; open && now_ms() < deadline && (sent <= len || now_ms() - last < EXCHANGE_QUIET_MS);) {
                struct pollfd p[2] = { { .fd = http_server_fd(server), .events = POLLIN },
                                       { .fd = fd, .events = POLLIN | (sent <= len ? POLLOUT : 0) } };
                poll(p, 2, 1);
                http_server_run(server);
                if (sent <= len) {
                        pump_out(fd, request, len, &sent);
                        last = now_ms();
                }
                ssize_t n;
                while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
                        got += (size_t)n;
                        last = now_ms();
                }
                open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        }
        close(fd);
        http_server_run(server); /* let the server see the close */
        return got;
}

const char *fuzz_agent_held(const char *owner) {
        const struct reservation *r = ledger_find_held(agent.ledger, owner);
        return r ? r->id : "";
}
