/* Tests for agent/ledger's undo of a change whose save failed, its journal (changes replayed, torn and damaged
 * records, compaction, kill -9 between commits), and its state file: the previous generation, the fallback to it, unreadable state, leftover
 * temporary files, a save that cannot build an entry (placement_to_json is wrapped: -Wl,--wrap), a save killed
 * with SIGKILL after each of its file-system calls (those are wrapped too), and a save the file-size limit stops. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "fileio.h"
#include "ledger.h"
#include "testutil.h"

static bool fail_placement_json;

json_t *__real_placement_to_json(const struct placement *p);
json_t *__wrap_placement_to_json(const struct placement *p);
json_t *__wrap_placement_to_json(const struct placement *p) {
        return fail_placement_json ? NULL : __real_placement_to_json(p);
}

/* A child process saving the ledger kills itself (SIGKILL: no clean-up runs) after kill_after file-system calls
 * that change or sync the state directory. no_exchange makes renameat2 answer EINVAL, as on a file system
 * without RENAME_EXCHANGE. */
static unsigned kill_after, fs_calls; /* pwrite64 and ftruncate64: the names _FILE_OFFSET_BITS=64 calls */
static bool no_exchange;

static void fs_call_done(void) {
        if (kill_after && ++fs_calls == kill_after)
                raise(SIGKILL);
}

#define WRAP_FS_CALL(ret, name, params, args)         \
        ret __real_##name params;                       \
        ret __wrap_##name params;                       \
        ret __wrap_##name params {                      \
                ret r = __real_##name args;             \
                fs_call_done();                         \
                return r;                               \
        }
WRAP_FS_CALL(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))
WRAP_FS_CALL(ssize_t, pwrite64, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP_FS_CALL(int, fsync, (int fd), (fd))
WRAP_FS_CALL(int, fdatasync, (int fd), (fd))
WRAP_FS_CALL(int, ftruncate64, (int fd, off_t len), (fd, len))
WRAP_FS_CALL(int, link, (const char *from, const char *to), (from, to))
WRAP_FS_CALL(int, rename, (const char *from, const char *to), (from, to))
WRAP_FS_CALL(int, unlink, (const char *path), (path))

int __real_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags) {
        if (no_exchange && (flags & RENAME_EXCHANGE)) {
                errno = EINVAL;
                return -1;
        }
        int r = __real_renameat2(fromfd, from, tofd, to, flags);
        fs_call_done();
        return r;
}

struct fixture {
        char dir[64], path[128];
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        snprintf(f->dir, sizeof f->dir, "/tmp/pvescale-ledger-XXXXXX");
        if (!mkdtemp(f->dir))
                return -1;
        snprintf(f->path, sizeof f->path, "%s/%s", f->dir, LEDGER_STATE_FILE);
        fail_placement_json = false;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        test_rmtree(f->dir);
        free(f);
        return 0;
}

/* A ledger of n count-only reservations (the simple policy: no topology needed). */
static struct ledger *ledger_of(unsigned n) {
        struct ledger *l = ledger_new();
        struct capacity free = { .cpus_free = 1000, .memory_free_bytes = 1ull << 40 };
        for (unsigned i = 0; i < n; i++) {
                struct reservation_request rq = { .shape = { 1, 1u << 30, 0 }, .ttl_seconds = 600 };
                struct reservation *r;
                char reason[128];
                snprintf(rq.owner, sizeof rq.owner, "claim-%u", i);
                assert_int_equal(ledger_reserve(l, NULL, &free, &rq, false, 1000, &r, reason, sizeof reason), 0);
        }
        return l;
}

static size_t loaded(struct fixture *f, int want) {
        struct ledger *l = NULL;
        char problem[512] = "";
        int r = ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem);
        if (r != want)
                fail_msg("ledger_load: %d, want %d (%s)", r, want, problem);
        size_t n = l ? l->n : 0;
        ledger_free(l);
        return n;
}

static void damage(const char *path) {
        FILE *fp = fopen(path, "r+");
        assert_non_null(fp);
        fseek(fp, 5, SEEK_SET);
        fputc('#', fp);
        fclose(fp);
}

static bool exists(const char *path) {
        return access(path, F_OK) == 0;
}

static void test_save_fails_when_an_entry_cannot_be_built(void **state) {
        struct fixture *f = *state;
        struct ledger *l = ledger_of(2);
        assert_int_equal(ledger_save(l, f->dir, 1), 0);
        struct placement *fake = (struct placement *)&fail_placement_json; /* never read: the wrap refuses */
        l->items[1]->placement = fake;
        fail_placement_json = true;
        assert_int_equal(ledger_save(l, f->dir, 1), -ENOMEM);
        l->items[1]->placement = NULL;
        fail_placement_json = false;
        assert_int_equal(loaded(f, 0), 2); /* the file still has both */
        ledger_free(l);
}

static void test_damaged_current_falls_back_to_previous(void **state) {
        struct fixture *f = *state;
        char prev[160];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        struct ledger *one = ledger_of(1), *three = ledger_of(3);
        assert_int_equal(ledger_save(one, f->dir, 1), 0);
        assert_false(exists(prev)); /* nothing to keep yet */
        assert_int_equal(ledger_save(three, f->dir, 1), 0);
        assert_true(exists(prev));
        damage(f->path);
        /* A damaged current file never replaces the good previous generation. */
        assert_int_equal(ledger_save(three, f->dir, 1), 0);
        damage(f->path);
        assert_int_equal(loaded(f, 1), 1);
        assert_false(exists(f->path)); /* set aside as .corrupt-<time> */
        char aside[192];
        snprintf(aside, sizeof aside, "%s.corrupt-2000", f->path);
        assert_true(exists(aside));
        ledger_free(one);
        ledger_free(three);
}

static void test_no_intact_generation_loads_nothing(void **state) {
        struct fixture *f = *state;
        struct ledger *l = ledger_of(1);
        assert_int_equal(ledger_save(l, f->dir, 1), 0);
        damage(f->path);
        assert_int_equal(loaded(f, -EBADMSG), 0);
        assert_true(exists(f->path)); /* kept for the operator: a restart must not find "no file" and start empty */
        ledger_free(l);
}

static void test_unreadable_state_loads_nothing(void **state) {
        struct fixture *f = *state;
        assert_int_equal(mkdir(f->path, 0700), 0); /* read() fails: EISDIR, as EACCES, EIO or EMFILE would */
        struct ledger *l = NULL;
        char problem[512] = "";
        assert_int_equal(ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem), -EISDIR);
        assert_null(l);
        assert_non_null(strstr(problem, "cannot read"));
        assert_true(exists(f->path));
}

static void test_no_file_is_an_empty_ledger(void **state) {
        struct fixture *f = *state;
        assert_int_equal(loaded(f, 0), 0);
}

static void test_leftover_temporaries_are_removed(void **state) {
        struct fixture *f = *state;
        static const char *const left[] = { ".tmp.Ab12Cd", ".tmp.zzzzzz", ".prev.tmp" };
        char path[192], other[192];
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s%s", f->path, left[i]);
                fclose(fopen(path, "w"));
        }
        char journal_tmp[192], journal[192];
        snprintf(journal_tmp, sizeof journal_tmp, "%s/%s.tmp.Qw3Er4", f->dir, LEDGER_JOURNAL_FILE);
        fclose(fopen(journal_tmp, "w")); /* the journal's making, interrupted */
        snprintf(journal, sizeof journal, "%s/%s.json", f->dir, LEDGER_JOURNAL_FILE);
        fclose(fopen(journal, "w"));
        snprintf(other, sizeof other, "%s/other.json.tmp.123456", f->dir);
        fclose(fopen(other, "w"));
        assert_int_equal(loaded(f, 0), 0);
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s%s", f->path, left[i]);
                if (exists(path))
                        fail_msg("%s was not removed", path);
        }
        assert_false(exists(journal_tmp));
        assert_true(exists(journal));
        assert_true(exists(other));
}

/* Empty dir, then save ledgers of 1, 1, 1 and 2 reservations: the current generation has 2, .prev has 1, and
 * the spare of the rotation exists (as it does from the third save on). */
static void two_generations(struct fixture *f) {
        test_rmtree(f->dir);
        assert_int_equal(mkdir(f->dir, 0700), 0);
        for (unsigned i = 0; i < 4; i++) {
                struct ledger *l = ledger_of(i < 3 ? 1 : 2);
                assert_int_equal(ledger_save(l, f->dir, 1), 0);
                ledger_free(l);
        }
}

static ino_t inode_of(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Copy the regular files of dir into a new directory copy (new inodes, the same bytes). */
static void copy_dir(const char *dir, char *copy, size_t len) {
        snprintf(copy, len, "/tmp/pvescale-ledger-copy-XXXXXX");
        assert_non_null(mkdtemp(copy));
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *e; (e = readdir(d));) {
                char from[PATH_MAX], to[PATH_MAX], buf[65536];
                snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
                snprintf(to, sizeof to, "%s/%s", copy, e->d_name);
                FILE *in = e->d_name[0] != '.' ? fopen(from, "r") : NULL;
                if (!in)
                        continue;
                FILE *out = fopen(to, "w");
                assert_non_null(out);
                size_t n = fread(buf, 1, sizeof buf, in);
                assert_int_equal(fwrite(buf, 1, n, out), n);
                fclose(in);
                fclose(out);
        }
        closedir(d);
}

/* What a crash can leave: two distinct generations (or one, and no shared inode); the acknowledged generation
 * (2 reservations) or the one being saved (3) loads; with the current file damaged, an older one loads. */
static void check_crash_state(struct fixture *f, unsigned step) {
        char prev[160], spare[160], copy[64];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        snprintf(spare, sizeof spare, "%s%s", f->path, LEDGER_SPARE_SUFFIX);
        ino_t cur_ino = inode_of(f->path), prev_ino = inode_of(prev), spare_ino = inode_of(spare);
        if (cur_ino && cur_ino == prev_ino)
                fail_msg("killed after call %u: %s and its .prev are one file (inode %lu)", step, f->path,
                         (unsigned long)cur_ino);
        if (spare_ino && (spare_ino == cur_ino || spare_ino == prev_ino))
                fail_msg("killed after call %u: the spare is also a generation (inode %lu)", step,
                         (unsigned long)spare_ino);
        copy_dir(f->dir, copy, sizeof copy);
        struct ledger *l = NULL;
        char problem[512] = "";
        int r = ledger_load(copy, NULL, 2000, &l, problem, sizeof problem);
        if (r < 0 || l->n < 2)
                fail_msg("killed after call %u: load %d with %zu reservations (%s)", step, r, l ? l->n : 0, problem);
        ledger_free(l);
        test_rmtree(copy);
        if (cur_ino)
                damage(f->path);
        l = NULL;
        r = ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem);
        if (r != 1 || l->n < 1)
                fail_msg("killed after call %u, current damaged: load %d (%s)", step, r, problem);
        ledger_free(l);
}

/* Save a third generation in a child killed after 1, 2, ... file-system calls, until one save completes. */
static void kill_at_every_step(struct fixture *f) {
        struct ledger *three = ledger_of(3);
        bool completed = false;
        unsigned step;
        for (step = 1; !completed && step < 64; step++) {
                two_generations(f);
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        kill_after = step;
                        _exit(ledger_save(three, f->dir, 1) == 0 ? 0 : 1);
                }
                int status;
                assert_int_equal(waitpid(pid, &status, 0), pid);
                completed = WIFEXITED(status);
                if (completed)
                        assert_int_equal(WEXITSTATUS(status), 0);
                else
                        assert_int_equal(WTERMSIG(status), SIGKILL);
                check_crash_state(f, step);
        }
        assert_true(completed);
        assert_in_range(step, 5, 63); /* it was killed after writing, syncing and renaming */
        ledger_free(three);
}

static void test_kill_9_at_every_step_of_a_save(void **state) {
        kill_at_every_step(*state);
}

static void test_kill_9_at_every_step_without_rename_exchange(void **state) {
        no_exchange = true;
        kill_at_every_step(*state);
        no_exchange = false;
}

/* Only the state files, none of a save's temporaries. */
static void assert_no_temporaries(const char *dir) {
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *e; (e = readdir(d));) {
                bool known = e->d_name[0] == '.' || strcmp(e->d_name, LEDGER_STATE_FILE) == 0 ||
                             strcmp(e->d_name, LEDGER_STATE_FILE LEDGER_PREV_SUFFIX) == 0;
                if (!known)
                        fail_msg("%s/%s was left behind", dir, e->d_name);
        }
        closedir(d);
}

/* A write the disk refuses (the file-size limit: EFBIG, as a full disk gives ENOSPC) fails the save, leaves no
 * temporary file, and keeps the two generations apart. */
static void test_failed_write_leaves_two_generations_and_no_temporaries(void **state) {
        struct fixture *f = *state;
        char prev[160];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        two_generations(f);
        struct ledger *many = ledger_of(40);
        struct rlimit saved, small;
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
        small = saved;
        small.rlim_cur = 1024;
        void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
        int r = ledger_save(many, f->dir, 1);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
        signal(SIGXFSZ, old);
        assert_int_equal(r, -EFBIG);
        assert_no_temporaries(f->dir);
        assert_int_not_equal(inode_of(f->path), inode_of(prev));
        assert_int_equal(loaded(f, 0), 2);
        damage(f->path);
        assert_int_equal(loaded(f, 1), 1);
        ledger_free(many);
}

/* A bind taken back gives the reservation its vmid and expiry again; a grant taken back removes it; a reservation
 * gone meanwhile is left alone. */
static void test_undo_takes_a_change_back(void **state) {
        (void)state;
        struct ledger *l = ledger_of(2);
        struct reservation *r = l->items[0];
        int64_t expiry = r->expires_at;
        struct ledger_undo bind = ledger_undo_bind(r);
        assert_int_equal(ledger_bind(l, r->id, 105), 0);
        assert_int_equal(r->vmid, 105);
        assert_int_equal(r->expires_at, 0);
        ledger_undo(l, &bind);
        assert_int_equal(r->vmid, 0);
        assert_int_equal(r->expires_at, expiry);
        assert_null(ledger_find_vmid(l, 105));

        struct ledger_undo grant = ledger_undo_reserve(l->items[1]);
        char id[LEDGER_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", l->items[1]->id);
        ledger_undo(l, &grant);
        assert_int_equal(l->n, 1);
        assert_null(ledger_find(l, id));
        assert_non_null(ledger_find(l, bind.id));
        ledger_undo(l, &grant); /* gone already */
        assert_int_equal(l->n, 1);

        assert_int_equal(ledger_release(l, bind.id), 0);
        ledger_undo(l, &bind); /* the reservation is gone: nothing to give back */
        assert_int_equal(l->n, 0);
        ledger_free(l);
}

/* ---- the journal (ledger_store) ---- */

static void reserve_one(struct ledger *l, const char *owner) {
        struct capacity free = { .cpus_free = 100000, .memory_free_bytes = 1ull << 50 };
        struct reservation_request rq = { .shape = { 1, 1u << 30, 0 }, .ttl_seconds = 600 };
        struct reservation *r;
        char reason[128];
        snprintf(rq.owner, sizeof rq.owner, "%s", owner);
        assert_int_equal(ledger_reserve(l, NULL, &free, &rq, false, 1000, &r, reason, sizeof reason), 0);
}

/* Load the state directory through the journal; fails the test unless ledger_store_load returns want. */
static struct ledger_store *store_load(struct fixture *f, int want, struct ledger **ret, char *problem, size_t len) {
        struct ledger_store *s = NULL;
        *ret = NULL;
        problem[0] = '\0';
        int r = ledger_store_load(f->dir, NULL, 2000, ret, &s, problem, len);
        if (r != want)
                fail_msg("ledger_store_load: %d, want %d (%s)", r, want, problem);
        return s;
}

static char *read_all(const char *path, size_t *len) {
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        char *buf = malloc(LEDGER_JOURNAL_BYTES + 1);
        *len = fread(buf, 1, LEDGER_JOURNAL_BYTES, fp);
        buf[*len] = '\0';
        fclose(fp);
        return buf;
}

/* Reserve owner-0 .. owner-(n-1), committing after each; the first commit writes the state file, the others
 * append records. */
static void commit_each(struct ledger_store *s, struct ledger *l, unsigned n) {
        char owner[32];
        for (unsigned i = 0; i < n; i++) {
                snprintf(owner, sizeof owner, "claim-%u", (unsigned)l->n);
                reserve_one(l, owner);
                assert_int_equal(ledger_store_commit(s, l), 0);
        }
}

/* The offset of the journal's record number k (from 1). */
static size_t record_at(const char *journal, unsigned k) {
        const char *p = journal;
        for (unsigned i = 1; i < k; i++)
                p = strchr(p, '\n') + 1;
        assert_true(p[0] == 'J');
        return (size_t)(p - journal);
}

static void overwrite(const char *path, size_t off, const char *bytes) {
        int fd = open(path, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, bytes, strlen(bytes), (off_t)off), (ssize_t)strlen(bytes));
        close(fd);
}

static void test_changes_are_journaled_and_replayed(void **state) {
        struct fixture *f = *state;
        char problem[512], journal[160];
        snprintf(journal, sizeof journal, "%s/%s", f->dir, LEDGER_JOURNAL_FILE);
        struct ledger *l;
        struct ledger_store *s = store_load(f, 0, &l, problem, sizeof problem);
        commit_each(s, l, 1);
        struct stat st;
        assert_int_equal(stat(journal, &st), 0);
        assert_int_equal(st.st_size, LEDGER_JOURNAL_BYTES);
        size_t before_len, after_len;
        char *before = read_all(f->path, &before_len);
        commit_each(s, l, 2);
        char first[LEDGER_ID_LEN + 1], second[LEDGER_ID_LEN + 1];
        snprintf(first, sizeof first, "%s", l->items[0]->id);
        snprintf(second, sizeof second, "%s", l->items[1]->id);
        assert_int_equal(ledger_bind(l, first, 150), 0);
        assert_int_equal(ledger_store_commit(s, l), 0);
        assert_int_equal(ledger_release(l, second), 0);
        assert_int_equal(ledger_store_commit(s, l), 0);
        assert_int_equal(ledger_store_commit(s, l), 0); /* nothing changed: nothing written */
        char *after = read_all(f->path, &after_len);
        assert_string_equal(before, after); /* four changes, the state file untouched */
        char *records = read_all(journal, &after_len);
        assert_int_equal(record_at(records, 4), strrchr(records, 'J') - records); /* 2 puts, a put, a delete */
        assert_non_null(strstr(records + record_at(records, 4), "\"delete\""));
        ledger_store_free(s);
        ledger_free(l);
        s = store_load(f, 0, &l, problem, sizeof problem);
        assert_int_equal(l->n, 2);
        assert_string_equal(l->items[0]->id, first);
        assert_int_equal(l->items[0]->vmid, 150);
        assert_string_equal(l->items[1]->owner, "claim-2");
        ledger_store_free(s);
        ledger_free(l);
        assert_int_equal(loaded(f, 0), 2); /* the load wrote the replayed state whole */
        free(before);
        free(after);
        free(records);
}

/* Commit `commits` reservations one at a time through a fresh store, then damage the JSON of the journal's record
 * number `record` (a byte near its end), as a torn write or a bad sector would. */
static void commit_then_damage(struct fixture *f, unsigned commits, unsigned record) {
        char problem[512], journal[160];
        snprintf(journal, sizeof journal, "%s/%s", f->dir, LEDGER_JOURNAL_FILE);
        struct ledger *l;
        struct ledger_store *s = store_load(f, 0, &l, problem, sizeof problem);
        commit_each(s, l, commits);
        ledger_store_free(s);
        ledger_free(l);
        size_t len;
        char *records = read_all(journal, &len);
        overwrite(journal, strchr(records + record_at(records, record), '\n') - records - 3, "x");
        free(records);
}

/* Load through the journal, expecting want and n reservations; the problem is left in problem. */
static void expect_loaded(struct fixture *f, int want, size_t n, char *problem, size_t len) {
        struct ledger *l;
        struct ledger_store *s = store_load(f, want, &l, problem, len);
        assert_int_equal(l->n, n);
        ledger_store_free(s);
        ledger_free(l);
}

/* A record whose write a crash tore (its checksum does not match) was never acknowledged: not applied, and the
 * load reports nothing. */
static void test_a_torn_last_record_is_not_applied(void **state) {
        char problem[512];
        commit_then_damage(*state, 3, 2); /* the state file, then records 1 and 2: the last one torn */
        expect_loaded(*state, 0, 2, problem, sizeof problem);
        assert_string_equal(problem, "");
}

/* A record damaged with later records of its epoch behind it: those were acknowledged, and are lost: the load
 * says so (1), keeps what came before, and rewrites the state. */
static void test_a_damaged_record_before_others_is_reported(void **state) {
        char problem[512];
        commit_then_damage(*state, 4, 2); /* records 1, 2 and 3: the middle one damaged */
        expect_loaded(*state, 1, 2, problem, sizeof problem);
        assert_non_null(strstr(problem, "damaged"));
        assert_non_null(strstr(problem, "after record 1"));
        expect_loaded(*state, 0, 2, problem, sizeof problem); /* rewritten: the next start is clean */
}

/* A record with a good checksum that does not fit the state (the delete of a reservation it does not have): the
 * journal is not this state's; nothing is loaded and the problem names the record. */
static void test_a_record_that_cannot_be_applied_loads_nothing(void **state) {
        struct fixture *f = *state;
        char problem[512], journal[160], hex[SHA256_HEX_LEN + 1], line[512], signed_part[256];
        snprintf(journal, sizeof journal, "%s/%s", f->dir, LEDGER_JOURNAL_FILE);
        struct ledger *l;
        struct ledger_store *s = store_load(f, 0, &l, problem, sizeof problem);
        commit_each(s, l, 1);
        ledger_store_free(s);
        ledger_free(l);
        assert_int_equal(ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem), 0);
        const char *json = "{\"delete\":\"r-0000000000000000\"}";
        snprintf(signed_part, sizeof signed_part, "%016llx 1 %s", (unsigned long long)l->journal_epoch, json);
        ledger_free(l);
        assert_int_equal(fileio_sha256_hex(signed_part, strlen(signed_part), hex), 0);
        snprintf(line, sizeof line, "J %.18s %s %s\n", signed_part, hex, json);
        overwrite(journal, 0, line);
        s = store_load(f, -EBADMSG, &l, problem, sizeof problem);
        assert_null(s);
        assert_null(l);
        assert_non_null(strstr(problem, "record 1 cannot be applied"));
}

/* Records that do not fit in the journal: the ledger is written whole under a new epoch and the journal starts
 * over; the older epoch's records left behind the new ones are never applied. */
static void test_a_full_journal_is_compacted(void **state) {
        struct fixture *f = *state;
        char problem[512];
        struct ledger *l;
        struct ledger_store *s = store_load(f, 0, &l, problem, sizeof problem);
        commit_each(s, l, 3); /* the state file, then two records of its epoch */
        uint64_t epoch;
        struct ledger *base;
        assert_int_equal(ledger_load(f->dir, NULL, 2000, &base, problem, sizeof problem), 0);
        epoch = base->journal_epoch;
        ledger_free(base);
        char owner[32];
        for (unsigned i = 0; i < 5000; i++) { /* about 1.5 MiB of records in one commit */
                snprintf(owner, sizeof owner, "bulk-%u", i);
                reserve_one(l, owner);
        }
        assert_int_equal(ledger_store_commit(s, l), 0);
        assert_int_equal(ledger_load(f->dir, NULL, 2000, &base, problem, sizeof problem), 0);
        assert_int_equal(base->n, 5003);
        assert_true(base->journal_epoch != epoch);
        ledger_free(base);
        assert_int_equal(ledger_release(l, l->items[0]->id), 0); /* a short record over the first old one */
        assert_int_equal(ledger_store_commit(s, l), 0);
        ledger_store_free(s);
        ledger_free(l);
        s = store_load(f, 0, &l, problem, sizeof problem);
        assert_int_equal(l->n, 5002);
        assert_string_equal(l->items[0]->owner, "claim-1");
        ledger_store_free(s);
        ledger_free(l);
}

/* A child commits one reservation at a time and reports each commit on a pipe; it is killed after 1, 2, ...
 * file-system calls. Every reservation it reported is there after the load, in order, and at most the one in
 * flight besides. */
static void test_kill_9_during_commits_keeps_every_acknowledged_change(void **state) {
        struct fixture *f = *state;
        bool completed = false;
        for (unsigned step = 1; !completed && step < 200; step++) {
                test_rmtree(f->dir);
                assert_int_equal(mkdir(f->dir, 0700), 0);
                int fds[2];
                assert_int_equal(pipe(fds), 0);
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        char problem[512];
                        struct ledger *l;
                        struct ledger_store *s = NULL;
                        close(fds[0]);
                        if (ledger_store_load(f->dir, NULL, 2000, &l, &s, problem, sizeof problem) != 0)
                                _exit(2);
                        kill_after = step;
                        for (unsigned i = 0; i < 6; i++) {
                                char owner[32];
                                snprintf(owner, sizeof owner, "claim-%u", i);
                                reserve_one(l, owner);
                                if (ledger_store_commit(s, l) != 0 || write(fds[1], "+", 1) != 1)
                                        _exit(3);
                        }
                        _exit(0);
                }
                close(fds[1]);
                unsigned acked = 0;
                char c;
                while (read(fds[0], &c, 1) == 1)
                        acked++;
                close(fds[0]);
                int status;
                assert_int_equal(waitpid(pid, &status, 0), pid);
                completed = WIFEXITED(status);
                if (completed)
                        assert_int_equal(WEXITSTATUS(status), 0);
                else
                        assert_int_equal(WTERMSIG(status), SIGKILL);
                char problem[512];
                struct ledger *l;
                struct ledger_store *s = store_load(f, 0, &l, problem, sizeof problem);
                if (l->n < acked || l->n > acked + 1)
                        fail_msg("killed after %u calls: %u commits acknowledged, %zu loaded", step, acked, l->n);
                for (size_t i = 0; i < l->n; i++) {
                        char owner[32];
                        snprintf(owner, sizeof owner, "claim-%zu", i);
                        assert_string_equal(l->items[i]->owner, owner);
                }
                ledger_store_free(s);
                ledger_free(l);
        }
        assert_true(completed);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_undo_takes_a_change_back),
                cmocka_unit_test_setup_teardown(test_save_fails_when_an_entry_cannot_be_built, setup, teardown),
                cmocka_unit_test_setup_teardown(test_changes_are_journaled_and_replayed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_torn_last_record_is_not_applied, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_damaged_record_before_others_is_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_record_that_cannot_be_applied_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_full_journal_is_compacted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_9_during_commits_keeps_every_acknowledged_change, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_damaged_current_falls_back_to_previous, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_intact_generation_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unreadable_state_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_file_is_an_empty_ledger, setup, teardown),
                cmocka_unit_test_setup_teardown(test_leftover_temporaries_are_removed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_9_at_every_step_of_a_save, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_9_at_every_step_without_rename_exchange, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_write_leaves_two_generations_and_no_temporaries, setup,
                                                teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
