/*
 * lguard.h - __gc metamethods of scripts run later, protected (lguard.c).
 */
#ifndef TY_LGUARD_H
#define TY_LGUARD_H

#include <lua.h>

/* Wraps newproxy, debug.setmetatable, ffi.gc and ffi.metatype of L so that
 * the finalizers set through them are queued by the collector and run by
 * lt_gc_run_queue. After luaL_openlibs, on the thread that owns L; 0, or a
 * lua_cpcall status (out of memory). */
int lt_guard_gc(lua_State *L);

/* The same for a state the runtime borrows (the caller of tycho.run), and
 * its undoing when the state is given back: the originals return (unless
 * the script replaced the wrappers) and finalizers set during the run
 * through the wrappers then run as the collector calls them. Call
 * lt_gc_final before lt_guard_give_back. 0, or a lua_cpcall status. */
int lt_guard_borrow(lua_State *L);
int lt_guard_give_back(lua_State *L); /* leaves an error message */

/* Entries in the calling thread's queue (its state's). */
extern _Thread_local unsigned lt_gc_queued;
/* Runs the queued finalizers, each under pcall (errors are logged). */
void lt_gc_run_queue(lua_State *L);
static inline void lt_gc_after_run(lua_State *L) {
  if (lt_gc_queued) lt_gc_run_queue(L);
}
/* Before the state closes: a full collection and the queue, protected. */
void lt_gc_final(lua_State *L);

/* Pushes tostring(value at idx) and returns it; a __tostring metamethod runs
 * protected, and one that fails, yields or returns no string gives a fixed
 * text ("(error object is a table value; its __tostring failed)"). Raises
 * only when memory runs out. */
const char *lt_error_text(lua_State *L, int idx);

#endif
