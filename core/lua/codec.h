/*
 * codec.h - the message codec: Lua values <-> bytes.
 *
 * Messages between actors are copied (docs/architecture.md): nil, booleans,
 * numbers, strings, the null sentinel (a NULL light userdata) and tables of
 * those; pids are plain numbers. A message
 * that crosses workers is encoded into bytes on the sender's Lua state and
 * decoded on the receiver's; one between actors of the same worker that
 * holds a table or a long string is deep copied in place (lt_codec_copy,
 * from core/lua/ldirect.c), with exactly the errors encode+decode would
 * give, so an actor cannot tell where its peer lives.
 *
 * Semantics shared by the three operations:
 *  - a table cycle is an error; a sub-table referenced twice (shared but not
 *    cyclic) becomes two independent copies, as the receiver has no way to
 *    share memory with the sender anyway;
 *  - metatables are not copied; array elements keep their order, including
 *    nil holes below the length (lua_objlen);
 *  - at most LT_CODEC_MAX_DEPTH nested tables (a top-level table is level 1);
 *  - errors name the value's stack index ("argument N"; in a C function that
 *    is its argument number) and its path, e.g. "at .handlers[3].cb".
 *
 * Wire format (little-endian, independent of the host; see codec.c):
 *   0x00 nil   0x01 false   0x02 true
 *   0x03 int32 (4 bytes)    0x04 double (8 bytes)
 *   0x05 string: varint length, bytes
 *   0x06 table: varint narr, u32 nhash, narr values, nhash key/value pairs
 *   0x07 handle: u64 token (only with hooks installed; see below)
 *   0x08 null: the NULL light userdata (JSON's null in lua-cjson and
 *        OpenResty: tycho.json.null), decoded as that same value
 *   0x40..0x7f string of 0..63 bytes    0x80..0xff integer 0..127
 * A buffer holds a sequence of values; concatenated encodings decode to the
 * concatenated value lists.
 */
#ifndef TY_CODEC_H
#define TY_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "base/buf.h"

#define LT_CODEC_MAX_DEPTH 100

/*
 * Handles: userdata that the binding lets travel (a connection moves to the
 * receiver, a listener is shared). The codec knows no userdata itself; the
 * binding installs one set of hooks for the process, and then
 *  - encode asks `encode` about each userdata value (with where the
 *    encoding goes): 0 and a token (written
 *    as tag 0x07), 1 when it is not a handle (the usual "cannot copy a
 *    userdata" error), or -1 with a message (the error names the path);
 *  - after an encode in which `encode` returned 0 at least once, `done`
 *    says whether the whole encode succeeded (the handles now travel) or
 *    failed (they stay with the sender);
 *  - decode of tag 0x07 calls `decode`, which pushes one value, or returns
 *    -1 (an unknown token: the message is malformed);
 *  - lt_codec_release calls `drop` for each handle of a message that will
 *    never be decoded (it reached nobody), so the handle is released now.
 * Without hooks tag 0x07 is a bad tag. lt_codec_copy refuses userdata
 * whatever the hooks: a same-state copy cannot know who receives a handle.
 */
/* Where an encoding goes (the hooks' `to`): a message that stays in this
 * process, one for another node (a handle cannot leave the process), or a
 * value a shared table stores (nor can it be stored: it would leave its
 * owner for no receiver). */
enum { LT_CODEC_TO_HERE = 0, LT_CODEC_TO_NODE = 1, LT_CODEC_TO_STORE = 2 };

typedef struct lt_codec_hooks {
  int (*encode)(lua_State *L, int idx, int to, uint64_t *token, char *err,
                size_t errlen);
  int (*decode)(lua_State *L, uint64_t token);
  void (*done)(lua_State *L, bool ok);
  void (*drop)(uint64_t token);
} lt_codec_hooks;

/* Installs the hooks (process-wide; any thread, idempotent). */
void lt_codec_set_hooks(const lt_codec_hooks *h);

/* Appends the encoding of the n stack values starting at index `first` to
 * buf. Returns 0, or -1 with a NUL-terminated message in err: an unsupported
 * type, naming the type and the path ("cannot copy a function (argument 2,
 * at .handlers[3].cb)"), a table cycle ("cannot copy a cycle (argument 1, at
 * .self)"), nesting deeper than LT_CODEC_MAX_DEPTH, or an encoding larger
 * than max_bytes (checked as it grows; SIZE_MAX for no limit). Never raises a
 * Lua error (short of running out of memory), leaves the Lua stack as it
 * was, and leaves buf->len unchanged on failure. */
int lt_codec_encode(lua_State *L, int first, int n, ty__buf *buf,
                    size_t max_bytes, char *err, size_t errlen);
/* The same for an encoding that goes `to` (LT_CODEC_TO_*; the hooks see it;
 * lt_codec_encode is LT_CODEC_TO_HERE). */
int lt_codec_encode_to(lua_State *L, int first, int n, ty__buf *buf,
                       size_t max_bytes, int to, char *err, size_t errlen);

/* lt_codec_encode's bytes for n values that are all nil, booleans, numbers
 * or strings of at most 63 bytes, written to out[0..cap): their length, or
 * -1 (nothing to report: the caller takes lt_codec_encode) when one is
 * anything else or they do not fit. No size limit is checked, no hook is
 * called (scalars have none). */
int lt_codec_encode_small(lua_State *L, int first, int n, char *out,
                          size_t cap);

/* Pushes every value encoded in data[0..len) and returns how many; on
 * malformed input (truncated, bad tag, bad lengths, too deep, nil or NaN
 * table keys) or too many values for the Lua stack, pushes nothing and
 * returns -1 with err. Safe on arbitrary bytes. */
int lt_codec_decode(lua_State *L, const char *data, size_t len, char *err,
                    size_t errlen);

/* Releases the handles inside an encoded message that will never be decoded
 * (through the hooks' drop); does nothing for a message without handles.
 * Needs no Lua state: any thread. */
void lt_codec_release(const char *data, size_t len);
/* Does an encoded message hold a handle (something that moves once)? */
bool lt_codec_has_handles(const char *data, size_t len);

/* Appends one value to an encoding, with no Lua state (a message built on
 * a thread that has none: the cluster gateway writes ("DOWN", pid, reason)
 * this way). 0, or -1 when out of memory. */
int lt_codec_put_number(ty__buf *b, double d);
int lt_codec_put_string(ty__buf *b, const char *s, size_t len);
int lt_codec_put_bool(ty__buf *b, bool v);
int lt_codec_put_nil(ty__buf *b);

/* Same-state deep copy with the semantics and errors of encode+decode
 * (max_bytes limits the size the encoding would have): pushes copies of the
 * n values at `first` and returns n, or returns -1 with err and pushes
 * nothing. */
int lt_codec_copy(lua_State *L, int first, int n, size_t max_bytes, char *err,
                  size_t errlen);
/* The same, and *bytes gets the size the encoding would have had (what a
 * direct message weighs in its receiver's mailbox: ldirect.c). */
int lt_codec_copy_sized(lua_State *L, int first, int n, size_t max_bytes,
                        size_t *bytes, char *err, size_t errlen);

#endif
