/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_journal.c -- libFuzzer target: the lease journal (agent/base/journal.c)
 * reading a file it cannot trust.
 *
 * The input's first byte is the harness's: with bit 0 set, the harness
 * writes the right CRC-32C into every frame it can delimit, so that
 * mutations get past the checksum to the field checks and the replay. The
 * rest is the journal file. Every record that decodes must encode again to
 * the very same bytes; the replay must stop where the decoder stops, visit
 * each live connection once and first, and each lease once, of a visited
 * connection. The file layer then opens the bytes as a journal file (the
 * tail after the last good record cut off), compacts it, and replays it:
 * the compacted file must be exactly the visited records, in their order.
 * Last, the good records go one by one through the journal's own calls
 * into a new file, which must replay the same. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int dir = -1;
static char dir_path[512];

static void remove_dir(void)
{
    unlinkat(dir, "journal", 0);
    unlinkat(dir, "journal.new", 0);
    rmdir(dir_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* On tmpfs, as the agent's journal is: on a disk, the file's writes
     * and renames would take most of the time. */
    const char *tmp = getenv("TMPDIR");
    if (access("/dev/shm", W_OK) == 0)
        tmp = "/dev/shm";
    snprintf(dir_path, sizeof dir_path, "%s/dlock-fuzz-journal-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir_path))
        abort();
    dir = open(dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        abort();
    atexit(remove_dir);
    return 0;
}

/* What a replay visited: each record encoded again, one after the other,
 * and the keys seen. */
struct visits {
    uint8_t *out;
    size_t len, cap;
    uint64_t (*keys)[2];
    size_t nkeys, nconns, kcap;
};

static void add_bytes(struct visits *v, const struct journal_rec *r)
{
    if (v->cap - v->len < JOURNAL_REC_MAX) {
        v->cap = v->cap * 2 + JOURNAL_REC_MAX;
        v->out = realloc(v->out, v->cap);
        if (!v->out)
            abort();
    }
    int n = journal_encode(r, v->out + v->len, v->cap - v->len);
    if (n <= 0)
        abort(); /* a replay handed out a record the encoder refuses */
    v->len += (size_t)n;
}

/* Adds the key (conn_id, lease_id); a key visited twice is a bug. */
static void add_key(struct visits *v, uint64_t conn_id, uint64_t lease_id, bool lease)
{
    for (size_t i = lease ? v->nconns : 0; i < v->nkeys; i++)
        if (v->keys[i][0] == conn_id && (!lease || v->keys[i][1] == lease_id))
            abort();
    if (v->nkeys == v->kcap) {
        v->kcap = v->kcap * 2 + 16;
        v->keys = realloc(v->keys, v->kcap * sizeof *v->keys);
        if (!v->keys)
            abort();
    }
    v->keys[v->nkeys][0] = conn_id;
    v->keys[v->nkeys++][1] = lease_id;
}

static int on_conn(void *arg, const struct journal_conn *c)
{
    struct visits *v = arg;
    if (v->nkeys != v->nconns)
        abort(); /* a connection after a lease */
    struct journal_rec r = {.type = JOURNAL_CONN_PUT, .conn = *c};
    add_bytes(v, &r);
    add_key(v, c->conn_id, 0, false);
    v->nconns++;
    return 0;
}

static int on_lease(void *arg, const struct journal_lease *l)
{
    struct visits *v = arg;
    static struct journal_rec r = {.type = JOURNAL_LEASE_PUT};
    r.lease = *l;
    add_bytes(v, &r);
    bool of_a_conn = false;
    for (size_t i = 0; i < v->nconns; i++)
        of_a_conn |= v->keys[i][0] == l->conn_id;
    if (!of_a_conn)
        abort();
    add_key(v, l->conn_id, l->lease_id, true);
    return 0;
}

static const struct journal_visitor visitor = {on_conn, on_lease};

static void visits_free(struct visits *v)
{
    free(v->out);
    free(v->keys);
}

/* The right CRC into every frame whose length fits. */
static void reseal(uint8_t *b, size_t len)
{
    size_t off = 0;
    while (len - off >= JOURNAL_HDR_LEN + JOURNAL_CRC_LEN) {
        uint32_t plen;
        memcpy(&plen, b + off, 4);
        if (plen > len - off - JOURNAL_HDR_LEN - JOURNAL_CRC_LEN)
            break;
        size_t n = JOURNAL_HDR_LEN + plen;
        uint32_t crc = journal_crc32c(b + off, n);
        memcpy(b + off + n, &crc, 4);
        off += n + JOURNAL_CRC_LEN;
    }
}

/* Decodes every record, each of which must encode to its own bytes; where
 * decoding stopped. */
static enum journal_read decode_all(const uint8_t *b, size_t len, size_t *good)
{
    static struct journal_rec r;
    static uint8_t again[JOURNAL_REC_MAX];
    size_t off = 0, n = 0;
    enum journal_read st;
    while ((st = journal_decode(b + off, len - off, &r, &n)) == JOURNAL_READ_RECORD) {
        if (n > len - off || n > JOURNAL_REC_MAX)
            abort();
        if (journal_encode(&r, again, sizeof again) != (int)n || memcmp(again, b + off, n) != 0)
            abort();
        off += n;
    }
    if (st == JOURNAL_READ_END && off != len)
        abort();
    *good = off;
    return st;
}

/* Are the n bytes at a and b the same (either may be NULL when n is 0)? */
static bool same(const uint8_t *a, const uint8_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

static void write_file(const uint8_t *b, size_t len)
{
    int fd = openat(dir, "journal", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, b, len) != (ssize_t)len || close(fd) < 0)
        abort();
}

/* The file compacted holds the visited records, and replays as they did. */
static void check_file(const uint8_t *b, size_t len, size_t good, const struct visits *v)
{
    write_file(b, len);
    struct journal j;
    struct journal_replay_info info;
    if (journal_open(&j, dir, "journal", &info) != 0 || info.good_bytes != good || j.size != good ||
        j.live != v->len)
        abort();
    if (journal_compact(&j) != 0 || j.size != v->len || j.live != v->len)
        abort();
    static uint8_t back[1 << 20];
    if (v->len > sizeof back || pread(j.fd, back, sizeof back, 0) != (ssize_t)v->len ||
        !same(back, v->out, v->len))
        abort();
    if (journal_close(&j) != 0)
        abort();
    struct visits again = {0};
    if (journal_replay(dir, "journal", &visitor, &again, &info) != 0 || again.len != v->len ||
        !same(again.out, v->out, v->len) || info.stop != JOURNAL_READ_END)
        abort();
    visits_free(&again);
}

/* Appends one decoded record through the file layer's calls: refused
 * (-ENOENT) exactly when the replay ignores it, which the end result
 * shows. */
static void append_one(struct journal *j, const struct journal_rec *r)
{
    int rc;
    switch (r->type) {
    case JOURNAL_CONN_PUT:
        rc = journal_put_conn(j, &r->conn);
        break;
    case JOURNAL_CONN_END:
        rc = journal_end_conn(j, r->conn.conn_id);
        break;
    case JOURNAL_LEASE_PUT:
        rc = journal_put_lease(j, &r->lease);
        break;
    default:
        rc = journal_end_lease(j, r->lease.conn_id, r->lease.lease_id);
    }
    if (rc != 0 && rc != -ENOENT)
        abort();
}

/* The good records appended one by one to a new journal replay as the
 * input did. */
static void check_appends(const uint8_t *b, size_t good, const struct visits *v)
{
    unlinkat(dir, "journal", 0);
    struct journal j;
    if (journal_open(&j, dir, "journal", NULL) != 0)
        abort();
    static struct journal_rec r;
    size_t n;
    for (size_t off = 0; off < good; off += n) {
        if (journal_decode(b + off, good - off, &r, &n) != JOURNAL_READ_RECORD)
            abort();
        append_one(&j, &r);
    }
    if (j.live != v->len || journal_close(&j) != 0)
        abort();
    struct visits again = {0};
    if (journal_replay(dir, "journal", &visitor, &again, NULL) != 0 || again.len != v->len ||
        !same(again.out, v->out, v->len))
        abort();
    visits_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 20))
        return 0;
    size_t len = size - 1;
    uint8_t *b = malloc(len ? len : 1);
    if (!b)
        abort();
    memcpy(b, data + 1, len);
    if (data[0] & 1)
        reseal(b, len);
    size_t good;
    enum journal_read st = decode_all(b, len, &good);
    struct visits v = {0};
    struct journal_replay_info info;
    if (journal_replay_buf(b, len, &visitor, &v, &info) != 0)
        abort();
    if (info.stop != st || info.good_bytes != good || info.file_bytes != len ||
        info.conns != v.nconns || info.leases != v.nkeys - v.nconns)
        abort();
    check_file(b, len, good, &v);
    check_appends(b, good, &v);
    visits_free(&v);
    free(b);
    return 0;
}
