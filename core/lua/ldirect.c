/*
 * ldirect.c - messages between actors of one worker, handed over without the
 * codec (docs/architecture.md, "Messages within a worker").
 *
 * Sender and receiver share one Lua state, so a copy made on the sender's
 * stack is a value the receiver can hold. The copy is the codec's
 * (lt_codec_copy_sized: the same walk, checks, errors and size limit as
 * encode), made while the sender runs but charged to the receiver, as the
 * decode it replaces would be. Until the receiver takes them the values sit
 * on a per-worker holder stack (one slot per message: the value itself for
 * one value, a table of them for several); the message that names the
 * slot goes through the receiver's one mailbox like any other, so it keeps
 * its place among encoded messages (per-pair FIFO, selective takes) and
 * meets the same limits: its mailbox weight is the size its encoding would
 * have had (ty_msg.held).
 *
 * Whatever the copy refuses (a function, a cycle, too deep, too big, a
 * userdata, a handle that must move) goes the codec's way instead, which
 * gives the codec's own error or moves the handle.
 */
#include "ldirect.h"
#include "lctx.h"
#include "lmem.h"
#include <string.h>

/* The payload: the slot on the holder's stack and the count of values. */
typedef struct dpay {
  int slot; /* 0 once taken or released */
  int n;
} dpay;

/* The values wait on the stack of a coroutine of the worker's state that
 * never runs (the holder): a slot is a stack index, free slots are listed
 * in C, and the stack is emptied whenever nothing waits. Measured against a
 * table of luaL_refs (bench/results-direct.md): stack slots cost no table
 * lookup. A LuaJIT stack holds some 65,000 values: past HOLDER_MAX waiting,
 * messages are encoded. */
#define HOLDER_MAX 60000

int lt_direct_store(lua_State *L, lua_State **holder) {
  *holder = lua_newthread(L);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Frees a slot: its value is dropped. Out of memory for the free list, the
 * slot stays taken until the stack empties. */
static void unref(lt_worker *lw, int slot) {
  if (slot <= 0) return;
  lua_State *h = lw->holder;
  if (--lw->direct_live == 0) { /* nothing waits: start afresh */
    lua_settop(h, 0);
    lw->nfree = 0;
    return;
  }
  lua_pushnil(h);
  lua_replace(h, slot);
  if (lw->nfree == lw->capfree) {
    uint32_t cap = lw->capfree ? 2 * lw->capfree : 64;
    int *v = realloc(lw->free_slots, cap * sizeof *v);
    if (!v) return;
    lw->free_slots = v;
    lw->capfree = cap;
  }
  lw->free_slots[lw->nfree++] = slot;
}

/* A slot for the value on top of L (popped), or 0 (left there) when the
 * holder is full. */
static int take_slot(lt_worker *lw, lua_State *L) {
  lua_State *h = lw->holder;
  /* Room for this value and one more: a take pushes a copy first. */
  if (!lua_checkstack(h, 2)) return 0;
  if (lw->nfree) {
    int s = lw->free_slots[--lw->nfree];
    lua_xmove(L, h, 1);
    lua_replace(h, s);
    lw->direct_live++;
    return s;
  }
  int top = lua_gettop(h);
  if (top >= HOLDER_MAX) return 0;
  lua_xmove(L, h, 1);
  lw->direct_live++;
  return top + 1;
}

int lt_direct_count(void) {
  lt_worker *lw = lt_worker_get();
  return lw ? (int)lw->direct_live : 0;
}

/* Replaces the n values on top of L with one: the value itself, or a table
 * of them (nils as holes: the count travels in the payload). */
static void pack(lua_State *L, int n) {
  if (n == 1) return;
  int base = lua_gettop(L) - n;
  lua_createtable(L, n, 0);
  for (int i = 1; i <= n; i++) {
    lua_pushvalue(L, base + i);
    lua_rawseti(L, -2, i);
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
}

ty_msg *lt_direct_copy(lua_State *L, ty_pid to, int first, int n) {
  ty_actor *ra = ty_actor_local(to);
  if (!ra || !ra->user) return NULL;
  lt_worker *lw = lt_worker_get();
  lt_actor *rla = ra->user;
  if (n < 0) n = 0;
  int top = lua_gettop(L);
  size_t bytes = 0;
  char err[1]; /* the codec path tells the reason */
  lt_charge *was = lt_mem_lend(&lw->heap, lt_charge_of(rla));
  int r = lt_codec_copy_sized(L, first, n, lt_ctx_get()->max_message, &bytes,
                              err, sizeof err);
  int slot = 0;
  if (r > 0) {
    pack(L, n);
    slot = take_slot(lw, L);
  }
  lt_mem_lend_end(&lw->heap, was);
  lua_settop(L, top);
  if (r < 0 || (r > 0 && !slot)) return NULL;
  ty_msg *m = ty_msg_try_new(sizeof(dpay));
  dpay p = {slot, n};
  if (!m) { /* no message names the slot: free it */
    unref(lw, slot);
    return NULL;
  }
  memcpy(m->data, &p, sizeof p);
  m->mark = LT_MARK_DIRECT;
  m->held = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
  return m;
}

int lt_direct_push(lua_State *L, ty_msg *m) {
  dpay p;
  memcpy(&p, m->data, sizeof p);
  if (p.n <= 0 || p.slot <= 0) return 0;
  lt_worker *lw = lt_worker_get();
  /* The copy was refused to the receiver's budget (lt_mem_lend): as its
   * decode would, this fails now (any growth is refused: LuaJIT raises
   * "not enough memory", and the actor ends with "memory"). */
  lt_charge *c = lw->heap.cur;
  if (c && c->doomed) {
    lua_createtable(L, 1, 0);
    lua_pop(L, 1);
  }
  luaL_checkstack(L, p.n + 2, "too many values in a message");
  lua_pushvalue(lw->holder, p.slot);
  lua_xmove(lw->holder, L, 1);
  int slot = p.slot;
  p.slot = 0; /* taken: a release after a failure does nothing */
  memcpy(m->data, &p, sizeof p);
  unref(lw, slot);
  if (p.n == 1) return 1;
  int t = lua_gettop(L);
  for (int i = 1; i <= p.n; i++) lua_rawgeti(L, t, i);
  lua_remove(L, t);
  return p.n;
}

void lt_msg_release(ty_msg *m) {
  if (!lt_msg_direct(m)) {
    lt_codec_release(m->data, m->len);
    return;
  }
  dpay p;
  memcpy(&p, m->data, sizeof p);
  lt_worker *lw = lt_worker_get();
  /* A direct message never leaves its worker: released there, or (a worker
   * abandoned by a stop) never, with its state. */
  if (p.slot <= 0 || !lw) return;
  unref(lw, p.slot);
  p.slot = 0;
  memcpy(m->data, &p, sizeof p);
}
