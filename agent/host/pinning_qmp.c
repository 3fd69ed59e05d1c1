/* pinning_qmp: one short QMP conversation (greeting, qmp_capabilities, query-cpus-fast) on a QEMU control socket. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning_qmp.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pinning.h"

/* A QMP reply larger than this is not a query-cpus-fast answer we can use (1024 vCPUs take ~200 KiB). */
#define QMP_MAX_MESSAGE (4 << 20)
#define QMP_READ_CHUNK 4096

struct qmp {
        int fd;
        struct timespec deadline;
        char *buf;
        size_t len, cap;
};

static int qmp_wait(const struct qmp *q, short events) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ns = (long long)(q->deadline.tv_sec - now.tv_sec) * 1000000000LL +
                       (q->deadline.tv_nsec - now.tv_nsec);
        if (ns <= 0)
                return -ETIMEDOUT;
        struct pollfd p = {.fd = q->fd, .events = events};
        int n = poll(&p, 1, (int)((ns + 999999) / 1000000)); /* rounded up: never time out before the deadline */
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        return n == 0 ? -ETIMEDOUT : 0;
}

static int qmp_open(struct qmp *q, const char *path, int timeout_ms) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(addr.sun_path))
                return -ENAMETOOLONG;
        strcpy(addr.sun_path, path);
        clock_gettime(CLOCK_MONOTONIC, &q->deadline);
        q->deadline.tv_sec += timeout_ms / 1000;
        q->deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (q->deadline.tv_nsec >= 1000000000L) {
                q->deadline.tv_sec++;
                q->deadline.tv_nsec -= 1000000000L;
        }
        q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (q->fd < 0)
                return -errno;
        /* A unix socket connects at once (or fails with EAGAIN when the backlog is full). When another client
         * holds QEMU's monitor, we connect into the backlog and the greeting never comes: that is the timeout. */
        return connect(q->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ? -errno : 0;
}

static void qmp_close(struct qmp *q) {
        if (q->fd >= 0)
                close(q->fd);
        free(q->buf);
}

static int qmp_fill(struct qmp *q) {
        if (q->cap - q->len < QMP_READ_CHUNK) {
                if (q->cap >= QMP_MAX_MESSAGE)
                        return -EBADMSG;
                size_t cap = q->cap ? q->cap * 2 : 2 * QMP_READ_CHUNK;
                char *buf = realloc(q->buf, cap);
                if (!buf)
                        return -ENOMEM;
                q->buf = buf;
                q->cap = cap;
        }
        int r = qmp_wait(q, POLLIN);
        if (r < 0)
                return r;
        ssize_t n = read(q->fd, q->buf + q->len, q->cap - q->len);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
                return -ECONNRESET;
        q->len += (size_t)n;
        return 0;
}

/* The next JSON line QEMU sent (it ends each message with "\r\n"). */
static int qmp_read(struct qmp *q, json_t **ret_msg) {
        char *nl;
        while (!(nl = q->len ? memchr(q->buf, '\n', q->len) : NULL)) {
                int r = qmp_fill(q);
                if (r < 0)
                        return r;
        }
        size_t line = (size_t)(nl - q->buf) + 1;
        json_t *msg = json_loadb(q->buf, line, 0, NULL);
        memmove(q->buf, q->buf + line, q->len - line);
        q->len -= line;
        if (!json_is_object(msg)) {
                json_decref(msg);
                return -EBADMSG;
        }
        *ret_msg = msg;
        return 0;
}

static int qmp_send_all(struct qmp *q, const char *data, size_t len) {
        while (len > 0) {
                int r = qmp_wait(q, POLLOUT);
                if (r < 0)
                        return r;
                ssize_t n = send(q->fd, data, len, MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (n > 0) {
                        data += n;
                        len -= (size_t)n;
                }
        }
        return 0;
}

static int qmp_send(struct qmp *q, const char *command) {
        json_t *request = json_pack("{s:s}", "execute", command);
        char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
        json_decref(request);
        if (!text)
                return -ENOMEM;
        int r = qmp_send_all(q, text, strlen(text));
        if (r == 0)
                r = qmp_send_all(q, "\n", 1);
        free(text);
        return r;
}

/* Send a command and wait for its {"return": ...}, skipping asynchronous {"event": ...} messages. */
static int qmp_execute(struct qmp *q, const char *command, json_t **ret_reply) {
        int r = qmp_send(q, command);
        while (r == 0) {
                json_t *msg = NULL;
                r = qmp_read(q, &msg);
                if (r < 0)
                        break;
                if (json_object_get(msg, "return")) {
                        *ret_reply = msg;
                        return 0;
                }
                r = json_object_get(msg, "error") ? -EPROTO : 0;
                json_decref(msg);
        }
        return r;
}

static int qmp_query_cpus(struct qmp *q, json_t **ret_reply) {
        json_t *msg = NULL;
        int r = qmp_read(q, &msg);
        if (r < 0)
                return r;
        bool greeting = json_object_get(msg, "QMP") != NULL;
        json_decref(msg);
        if (!greeting)
                return -EBADMSG;
        r = qmp_execute(q, "qmp_capabilities", &msg);
        if (r < 0)
                return r;
        json_decref(msg);
        return qmp_execute(q, "query-cpus-fast", ret_reply);
}

int pinning_qmp_vcpu_threads(const char *socket_path, int timeout_ms, int **ret_tids, unsigned *ret_n) {
        struct qmp q = {.fd = -1};
        json_t *reply = NULL;
        int r = qmp_open(&q, socket_path, timeout_ms);
        if (r == 0)
                r = qmp_query_cpus(&q, &reply);
        qmp_close(&q);
        if (r == 0)
                r = pinning_parse_cpus_fast(reply, ret_tids, ret_n);
        json_decref(reply);
        return r;
}
