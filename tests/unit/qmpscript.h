/* qmpscript: a scripted QMP server in a child process, for the unit tests of the QMP client and its worker. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Captured from QEMU 7.2 (Debian bookworm), -smp 4,sockets=2,cores=2, KVM. */
static const char CPUS_FAST_REPLY[] =
        "{\"return\": [{\"thread-id\": 24433, \"props\": {\"core-id\": 0, \"thread-id\": 0, \"socket-id\": 0}, "
        "\"qom-path\": \"/machine/unattached/device[0]\", \"cpu-index\": 0, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24434, \"props\": {\"core-id\": 1, \"thread-id\": 0, \"socket-id\": 0}, "
        "\"qom-path\": \"/machine/unattached/device[2]\", \"cpu-index\": 1, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24435, \"props\": {\"core-id\": 0, \"thread-id\": 0, \"socket-id\": 1}, "
        "\"qom-path\": \"/machine/unattached/device[3]\", \"cpu-index\": 2, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24436, \"props\": {\"core-id\": 1, \"thread-id\": 0, \"socket-id\": 1}, "
        "\"qom-path\": \"/machine/unattached/device[4]\", \"cpu-index\": 3, \"target\": \"x86_64\"}]}\r\n";
static const char GREETING[] =
        "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}, \"package\": "
        "\"Debian 1:7.2+dfsg-7+deb12u18+b3\"}, \"capabilities\": [\"oob\"]}}\r\n";
static const char STOP_EVENT[] =
        "{\"timestamp\": {\"seconds\": 1795242101, \"microseconds\": 719876}, \"event\": \"STOP\"}\r\n";


struct qmp_server {
        char dir[64];
        char path[128];
        int listen_fd;
        pid_t child;
};

/* Read one line from fd into buf; false at EOF. */
static inline bool qmpscript_read_line(int fd, char *buf, size_t size) {
        size_t n = 0;
        while (n + 1 < size) {
                char c;
                if (read(fd, &c, 1) != 1)
                        return false;
                buf[n++] = c;
                if (c == '\n')
                        break;
        }
        buf[n] = '\0';
        return true;
}

static inline bool qmpscript_write_all(int fd, const char *s) {
        size_t len = strlen(s);
        return write(fd, s, len) == (ssize_t)len;
}

/* What the child process does for one client. Exit status 0 = the client spoke QMP correctly. */
enum qmp_script { SCRIPT_GOOD, SCRIPT_ERROR, SCRIPT_SILENT, SCRIPT_NO_GREETING };

static inline bool qmpscript_expect(int fd, const char *command) {
        char line[512];
        if (!qmpscript_read_line(fd, line, sizeof(line)))
                return false;
        json_t *msg = json_loads(line, 0, NULL);
        const char *got = json_string_value(json_object_get(msg, "execute"));
        bool ok = got && strcmp(got, command) == 0 && strchr(line, '\n');
        json_decref(msg);
        return ok;
}

static inline int qmpscript_run(int fd, enum qmp_script script) {
        if (script == SCRIPT_SILENT) {
                sleep(5); /* like a QEMU busy with another client: never greets */
                return 0;
        }
        if (script == SCRIPT_NO_GREETING)
                return qmpscript_write_all(fd, "{\"return\": {}}\r\n") ? 0 : 1;
        if (!qmpscript_write_all(fd, GREETING) || !qmpscript_expect(fd, "qmp_capabilities"))
                return 1;
        if (!qmpscript_write_all(fd, STOP_EVENT) || !qmpscript_write_all(fd, "{\"return\": {}}\r\n"))
                return 1;
        if (!qmpscript_expect(fd, "query-cpus-fast"))
                return 1;
        if (script == SCRIPT_ERROR)
                return qmpscript_write_all(fd, "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"x\"}}\r\n")
                               ? 0 : 1;
        /* an event first, then the reply cut in two writes */
        if (!qmpscript_write_all(fd, STOP_EVENT))
                return 1;
        size_t half = sizeof(CPUS_FAST_REPLY) / 2;
        if (write(fd, CPUS_FAST_REPLY, half) != (ssize_t)half)
                return 1;
        usleep(20000);
        return qmpscript_write_all(fd, CPUS_FAST_REPLY + half) ? 0 : 1;
}

static inline void qmpscript_start(struct qmp_server *s, enum qmp_script script) {
        strcpy(s->dir, "/tmp/test_pinning_qmpXXXXXX");
        assert_non_null(mkdtemp(s->dir));
        snprintf(s->path, sizeof(s->path), "%s/105.qmp", s->dir);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        strcpy(addr.sun_path, s->path);
        s->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        assert_int_equal(listen(s->listen_fd, 4), 0);
        s->child = fork();
        assert_true(s->child >= 0);
        if (s->child == 0) {
                int fd = accept(s->listen_fd, NULL, NULL);
                _exit(fd < 0 ? 2 : qmpscript_run(fd, script));
        }
        close(s->listen_fd);
}

/* The child's exit status; kills it first when it is still running (the silent script). */
static inline int qmpscript_stop(struct qmp_server *s, bool kill_it) {
        if (kill_it)
                kill(s->child, SIGKILL);
        int status = 0;
        waitpid(s->child, &status, 0);
        unlink(s->path);
        rmdir(s->dir);
        return kill_it ? 0 : WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}
