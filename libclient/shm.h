/* SPDX-License-Identifier: BSD-3-Clause */
/* shm.h -- the shared-memory lease page: its layout and the seqlock through
 * which the agent writes a slot and a client reads it. Shared by dlockd and
 * libdlock; see docs/protocol.md, "Lease page".
 *
 * Each client connection gets two memfds at HELLO_OK: the lease page (sealed
 * against writes from any other mapping: the client maps it read-only) and
 * the touch page (one u64 per slot, written by the client, read by the agent
 * as untrusted input). Slot i of both belongs to the lease GRANTED with slot
 * i until the agent reuses it for a later lease of the same connection.
 */
#ifndef DLOCK_SHM_H
#define DLOCK_SHM_H

#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC    0x4d534c44u /* "DLSM" read as a little-endian u32 */
#define SHM_VERSION  1
#define SHM_HDR_SIZE 64
#define SHM_SPIN_MAX 1000 /* reads give up after this many busy tries */

struct shm_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t slot_size; /* sizeof(struct shm_slot) */
    uint32_t nslots;
};

struct shm_slot {
    uint32_t seq;        /* odd while the agent writes the slot */
    uint32_t state;      /* 0 free, else a dlock_state */
    uint64_t lease_id;   /* the lease the slot holds now */
    uint64_t fence;      /* its fencing token */
    int64_t deadline_ns; /* validity deadline, CLOCK_BOOTTIME */
};

/* A touch slot's bit 63: the client released the lease while no agent ran
 * (it restarted), so that its successor releases the key instead of renewing
 * it. The rest of the word is the client's last touch, as always
 * (CLOCK_BOOTTIME ns never reach bit 63). */
#define SHM_TOUCH_RELEASED (UINT64_C(1) << 63)

static inline size_t shm_page_size(uint32_t nslots)
{
    return SHM_HDR_SIZE + (size_t)nslots * sizeof(struct shm_slot);
}

static inline size_t shm_touch_size(uint32_t nslots)
{
    return (size_t)nslots * sizeof(uint64_t);
}

static inline struct shm_slot *shm_slots(void *page)
{
    return (struct shm_slot *)((char *)page + SHM_HDR_SIZE);
}

/* Agent side: a seqlock write of the whole slot. */
static inline void shm_slot_write(struct shm_slot *s, uint32_t state, uint64_t lease_id,
                                  uint64_t fence, int64_t deadline_ns)
{
    uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->state, state, __ATOMIC_RELAXED);
    __atomic_store_n(&s->lease_id, lease_id, __ATOMIC_RELAXED);
    __atomic_store_n(&s->fence, fence, __ATOMIC_RELAXED);
    __atomic_store_n(&s->deadline_ns, deadline_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
}

/* Client side: a consistent copy of the slot. Returns 0, or -1 when the agent
 * stayed in the middle of a write (it may be stopped): the caller then treats
 * the lease as not valid. */
static inline int shm_slot_read(const struct shm_slot *s, struct shm_slot *out)
{
    for (int i = 0; i < SHM_SPIN_MAX; i++) {
        uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (seq & 1)
            continue;
        out->state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
        out->lease_id = __atomic_load_n(&s->lease_id, __ATOMIC_RELAXED);
        out->fence = __atomic_load_n(&s->fence, __ATOMIC_RELAXED);
        out->deadline_ns = __atomic_load_n(&s->deadline_ns, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq) {
            out->seq = seq;
            return 0;
        }
    }
    return -1;
}

#endif
