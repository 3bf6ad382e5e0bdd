/*
 * lfn.h - functions on their way to other Lua states (lfn.c): a spawned
 * function travels as bytecode plus the map of its module upvalues.
 */
#ifndef TY_LFN_H
#define TY_LFN_H

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>

#include "base/buf.h"

typedef struct lt_fn lt_fn;

/* How an actor was given its function. */
enum {
  LT_FN_BYTECODE = 0,
  LT_FN_MODULE,
  LT_FN_FILE,
  LT_FN_REF,
  LT_FN_HERE /* tycho.run's main: the function itself, in the caller's state */
};

/* The interned blob of the function at idx, checked and dumped once per
 * worker; raises tycho.<fname> errors (C functions, upvalues that are not
 * modules). */
lt_fn *lt_fn_of(lua_State *L, int idx, const char *fname);
/* The blob of module `name` (spawned by name). */
lt_fn *lt_fn_module(const char *name, size_t len);
/* Spawned by name, a module runs the version the spawner saw: the first
 * spawn of f reads the module's file (package.searchpath, the spawner's
 * package.path) and every worker that has not loaded the module loads it
 * from those bytes, not from the file as it is when it gets there. A
 * module in package.preload or not a Lua file is required as before.
 * tycho.reload replaces the source (lt_fn_set_source). */
void lt_fn_pin_source(lua_State *L, lt_fn *f);
void lt_fn_set_source(lt_fn *f, const char *code, size_t len,
                      const char *chunk);
/* Appends the payload of the function at idx (what a blob holds) to out, for
 * the blocking pool; raises as lt_fn_of. */
void lt_fn_payload(lua_State *L, int idx, const char *fname, ty__buf *out);
/* The function at fn gets its upvalues from the map at map ({[i] = module
 * name | true}: require(name), or the function itself). Returns 0, or -1
 * with the error of a failed require pushed. */
int lt_fn_bind(lua_State *L, int fn, int map);
/* Pushes blob f's function on co, loading it on first use on `worker`;
 * returns 0, or -1 with an error message pushed. */
int lt_fn_push(lua_State *co, lt_fn *f, unsigned worker);
/* Worker `worker` (the caller) forgets the function it loaded from f: the
 * next spawn loads it again (a module after tycho.reload). */
void lt_fn_forget(lua_State *L, lt_fn *f, unsigned worker);
/* "file.lua:line" of f's function (or "module name"), from its bytes
 * alone: any thread. */
void lt_fn_origin(const lt_fn *f, char *buf, size_t n);
/* A blob's id (> 0), valid for the run: a function as a plain number, for
 * specs that travel in messages; lt_fn_by_id turns it back (NULL for any
 * number that names no blob). */
/* The module name of a blob spawned by name (LT_FN_MODULE), else NULL. */
const char *lt_fn_name(const lt_fn *f, size_t *len);
uint32_t lt_fn_id(const lt_fn *f);
int lt_fn_kind(const lt_fn *f); /* LT_FN_BYTECODE or LT_FN_MODULE */
lt_fn *lt_fn_by_id(double id);
/* Debug mode (lt_ctx.debug): raises tycho.<fname> when the function at idx
 * reads a global that a fresh worker state lacks (lglobals.c). */
void lt_check_globals(lua_State *L, int idx, const char *fname);
/* Frees every blob: after the runtime stopped. */
void lt_fn_clear(void);

#endif
