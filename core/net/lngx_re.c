/*
 * lngx_re.c - ngx.re.find, ngx.re.match and ngx.re.gsub of tycho.ngx on
 * PCRE2, with lua-nginx-module's arguments and results:
 *
 *   re.match(subject, regex [, flags [, ctx [, res]]]) -> captures | nil
 *   re.find(subject, regex [, flags [, ctx [, nth]]])  -> from, to | nil
 *   re.gsub(subject, regex, replace [, flags])         -> new, n
 *
 * captures: [0] the whole match, [1..] the groups (false when a group took
 * no part), names too (with flag D, each name holds an array). ctx.pos is
 * where the search starts (1-based) and, after a match, the position after
 * it. replace: a template ($0, $1, ${name}, $$) or a function given the
 * captures. Flags: a anchored, D duplicate names, i caseless, j JIT, m
 * multiline, o compile once (cached per state, at most 1024), s dotall, u
 * UTF-8, U UTF-8 unchecked, x extended; d and J are not supported (an
 * error). A regex that does not compile answers nil, nil, err (find,
 * match: nil, err).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "lngx.h"

#define RE_MT "tycho.ngx.regex"
#define CACHE_MAX 1024

typedef struct re_ud {
  pcre2_code *code;
} re_ud;

static char cache_key; /* registry[&cache_key] = {[flags\0regex] = re_ud} */
static char count_key; /* registry[&count_key] = entries cached */

static int re_gc(lua_State *L) {
  re_ud *u = lua_touserdata(L, 1);
  if (u->code) pcre2_code_free(u->code);
  u->code = NULL;
  return 0;
}

/* Parses the flags; returns the compile options, and sets *jit, *once,
 * *dup. Raises on a flag it does not know. */
static uint32_t parse_flags(lua_State *L, const char *f, bool *jit, bool *once,
                            bool *dup) {
  uint32_t o = 0;
  *jit = *once = *dup = false;
  for (const char *p = f; *p; p++) {
    switch (*p) {
    case 'a': o |= PCRE2_ANCHORED; break;
    case 'D':
      o |= PCRE2_DUPNAMES;
      *dup = true;
      break;
    case 'i': o |= PCRE2_CASELESS; break;
    case 'j': *jit = true; break;
    case 'm': o |= PCRE2_MULTILINE; break;
    case 'o': *once = true; break;
    case 's': o |= PCRE2_DOTALL; break;
    case 'u': o |= PCRE2_UTF; break;
    case 'U': o |= PCRE2_UTF | PCRE2_NO_UTF_CHECK; break;
    case 'x': o |= PCRE2_EXTENDED; break;
    case 'd':
    case 'J':
      luaL_error(L, "ngx.re: flag \"%c\" is not supported by tycho.ngx", *p);
      break;
    default: luaL_error(L, "ngx.re: unknown flag \"%c\" (flags \"%s\")", *p, f);
    }
  }
  return o;
}

/* Pushes the compiled regex (a userdata) or nil + message (returns 0). */
static pcre2_code *compile(lua_State *L, int ridx, const char *flags,
                           bool *dup) {
  size_t rlen;
  const char *re = luaL_checklstring(L, ridx, &rlen);
  bool jit, once;
  uint32_t opts = parse_flags(L, flags, &jit, &once, dup);
  if (once) {
    lua_pushlightuserdata(L, &cache_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_istable(L, -1)) {
      lua_pushstring(L, flags);
      lua_pushlstring(L, "\0", 1);
      lua_pushvalue(L, ridx);
      lua_concat(L, 3);
      lua_rawget(L, -2);
      if (lua_isuserdata(L, -1)) {
        lua_remove(L, -2);
        return ((re_ud *)lua_touserdata(L, -1))->code;
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  int errcode;
  PCRE2_SIZE erroff;
  pcre2_code *code =
      pcre2_compile((PCRE2_SPTR)re, rlen, opts, &errcode, &erroff, NULL);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(errcode, msg, sizeof msg);
    lua_pushfstring(L, "failed to compile regex \"%s\": %s at offset %d", re,
                    (const char *)msg, (int)erroff);
    return NULL;
  }
  if (jit) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* else interpreted */
  re_ud *u = lua_newuserdata(L, sizeof *u);
  u->code = code;
  if (luaL_newmetatable(L, RE_MT)) {
    lua_pushcfunction(L, re_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (once) { /* cache it, until the cache is full */
    lua_pushlightuserdata(L, &count_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    lua_Integer n = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (n < CACHE_MAX) {
      lua_pushlightuserdata(L, &cache_key);
      lua_rawget(L, LUA_REGISTRYINDEX);
      if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushlightuserdata(L, &cache_key);
        lua_pushvalue(L, -2);
        lua_rawset(L, LUA_REGISTRYINDEX);
      }
      lua_pushstring(L, flags);
      lua_pushlstring(L, "\0", 1);
      lua_pushvalue(L, ridx);
      lua_concat(L, 3);
      lua_pushvalue(L, -3);
      lua_rawset(L, -3);
      lua_pop(L, 1);
      lua_pushlightuserdata(L, &count_key);
      lua_pushinteger(L, n + 1);
      lua_rawset(L, LUA_REGISTRYINDEX);
    }
  }
  return code;
}

/* ctx.pos (1-based) as a 0-based offset, or 0. */
static size_t ctx_pos(lua_State *L, int cidx, size_t len) {
  if (lua_isnoneornil(L, cidx)) return 0;
  luaL_checktype(L, cidx, LUA_TTABLE);
  lua_getfield(L, cidx, "pos");
  lua_Integer pos = lua_isnumber(L, -1) ? lua_tointeger(L, -1) : 1;
  lua_pop(L, 1);
  if (pos < 1) pos = 1;
  return (size_t)pos - 1 > len ? len + 1 : (size_t)pos - 1;
}

/* Runs code on subject from start. Returns the number of pairs set, 0 for
 * no match, or -1 with an error message pushed. */
static int exec(lua_State *L, pcre2_code *code, const char *s, size_t len,
                size_t start, uint32_t mopts, pcre2_match_data *md) {
  if (start > len) return 0;
  int rc = pcre2_match(code, (PCRE2_SPTR)s, len, start, mopts, md, NULL);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    lua_pushfstring(L, "pcre2_match() failed: %s", (const char *)msg);
    return -1;
  }
  return rc ? rc : (int)pcre2_get_ovector_count(md);
}

static void push_group(lua_State *L, const char *s, PCRE2_SIZE *ov, int i,
                       int rc) {
  if (i >= rc || ov[2 * i] == PCRE2_UNSET) lua_pushboolean(L, 0);
  else lua_pushlstring(L, s + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
}

/* Fills the table on top with the captures of a match. */
static void fill_captures(lua_State *L, pcre2_code *code, const char *s,
                          pcre2_match_data *md, int rc, bool dup) {
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
  uint32_t ngroups = 0, nnames = 0, esize = 0;
  PCRE2_SPTR table = NULL;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &ngroups);
  for (int i = 0; i <= (int)ngroups; i++) {
    push_group(L, s, ov, i, rc);
    lua_rawseti(L, -2, i);
  }
  pcre2_pattern_info(code, PCRE2_INFO_NAMECOUNT, &nnames);
  pcre2_pattern_info(code, PCRE2_INFO_NAMEENTRYSIZE, &esize);
  pcre2_pattern_info(code, PCRE2_INFO_NAMETABLE, &table);
  for (uint32_t k = 0; k < nnames; k++) {
    PCRE2_SPTR e = table + k * esize;
    int g = e[0] << 8 | e[1];
    const char *name = (const char *)e + 2;
    if (!dup) {
      push_group(L, s, ov, g, rc);
      lua_setfield(L, -2, name);
      continue;
    }
    if (g >= rc || ov[2 * g] == PCRE2_UNSET) continue;
    lua_getfield(L, -1, name); /* D: every group of that name, in order */
    if (!lua_istable(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, name);
    }
    push_group(L, s, ov, g, rc);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    lua_pop(L, 1);
  }
}

/* Sets ctx.pos after a match ending at the 0-based offset `end`. */
static void ctx_set(lua_State *L, int cidx, size_t end) {
  if (lua_isnoneornil(L, cidx)) return;
  lua_pushinteger(L, (lua_Integer)end + 1);
  lua_setfield(L, cidx, "pos");
}

/* Match data in a box the collector frees: a raise between creating and
 * freeing it (a bad gsub template, a replace function that fails, no memory
 * for the captures) must not leak it. The normal paths free it at once. */
#define MD_MT "tycho.ngx.match_data"

static int md_gc(lua_State *L) {
  pcre2_match_data **b = lua_touserdata(L, 1);
  if (*b) pcre2_match_data_free(*b);
  *b = NULL;
  return 0;
}

static pcre2_match_data **md_new(lua_State *L, pcre2_code *code) {
  pcre2_match_data **b = lua_newuserdata(L, sizeof *b);
  *b = NULL;
  if (luaL_newmetatable(L, MD_MT)) {
    lua_pushcfunction(L, md_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  *b = pcre2_match_data_create_from_pattern(code, NULL);
  if (!*b) luaL_error(L, "not enough memory");
  return b;
}

static void md_free(pcre2_match_data **b) {
  pcre2_match_data_free(*b);
  *b = NULL;
}

static int l_match(lua_State *L) {
  lua_settop(L, 5); /* what compile pushes lands above the arguments */
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *flags = luaL_optstring(L, 3, "");
  bool dup;
  pcre2_code *code = compile(L, 2, flags, &dup);
  if (!code) return lt_ngx_fail(L);
  size_t start = ctx_pos(L, 4, len);
  pcre2_match_data **mdb = md_new(L, code), *md = *mdb;
  int rc = exec(L, code, s, len, start, 0, md);
  if (rc <= 0) {
    md_free(mdb);
    return rc < 0 ? lt_ngx_fail(L) : (lua_pushnil(L), 1);
  }
  if (lua_istable(L, 5)) lua_pushvalue(L, 5); /* res: the caller's table */
  else lua_newtable(L);
  fill_captures(L, code, s, md, rc, dup);
  ctx_set(L, 4, pcre2_get_ovector_pointer(md)[1]);
  md_free(mdb);
  return 1;
}

static int l_find(lua_State *L) {
  lua_settop(L, 5);
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *flags = luaL_optstring(L, 3, "");
  int nth = (int)luaL_optinteger(L, 5, 0);
  bool dup;
  pcre2_code *code = compile(L, 2, flags, &dup);
  if (!code) return lt_ngx_fail(L);
  size_t start = ctx_pos(L, 4, len);
  pcre2_match_data **mdb = md_new(L, code), *md = *mdb;
  int rc = exec(L, code, s, len, start, 0, md);
  if (rc <= 0) {
    md_free(mdb);
    return rc < 0 ? lt_ngx_fail(L) : (lua_pushnil(L), 1);
  }
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
  ctx_set(L, 4, ov[1]);
  if (nth < 0 || nth >= rc || ov[2 * nth] == PCRE2_UNSET) {
    md_free(mdb);
    lua_pushnil(L);
    return 1;
  }
  lua_pushinteger(L, (lua_Integer)ov[2 * nth] + 1);
  lua_pushinteger(L, (lua_Integer)ov[2 * nth + 1]);
  md_free(mdb);
  return 2;
}

/* Appends the template at tidx expanded for one match; raises on a bad
 * $-variable. */
static void expand(lua_State *L, luaL_Buffer *b, const char *t, size_t tl,
                   pcre2_code *code, const char *s, PCRE2_SIZE *ov, int rc) {
  for (size_t i = 0; i < tl; i++) {
    if (t[i] != '$') {
      luaL_addchar(b, t[i]);
      continue;
    }
    if (++i == tl) luaL_error(L, "ngx.re.gsub: a lone \"$\" in the template");
    if (t[i] == '$') {
      luaL_addchar(b, '$');
      continue;
    }
    int g = -1;
    if (t[i] >= '0' && t[i] <= '9') {
      g = 0;
      while (i < tl && t[i] >= '0' && t[i] <= '9') g = g * 10 + (t[i++] - '0');
      i--;
    } else if (t[i] == '{') {
      size_t j = i + 1;
      while (j < tl && t[j] != '}') j++;
      if (j == tl) luaL_error(L, "ngx.re.gsub: \"${\" without \"}\"");
      char name[128];
      size_t n = j - i - 1;
      if (n == 0 || n >= sizeof name)
        luaL_error(L, "ngx.re.gsub: bad variable name in the template");
      memcpy(name, t + i + 1, n);
      name[n] = 0;
      if (name[0] >= '0' && name[0] <= '9') g = atoi(name);
      else g = pcre2_substring_number_from_name(code, (PCRE2_SPTR)name);
      i = j;
    }
    if (g < 0)
      luaL_error(L, "ngx.re.gsub: invalid capturing variable name in the "
                    "template");
    if (g < rc && ov[2 * g] != PCRE2_UNSET)
      luaL_addlstring(b, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
  }
}

/* The function's answer for one match, appended (a string or number). */
static void call_replace(lua_State *L, luaL_Buffer *b, int fidx,
                         pcre2_code *code, const char *s, pcre2_match_data *md,
                         int rc, bool dup) {
  lua_pushvalue(L, fidx);
  lua_newtable(L);
  fill_captures(L, code, s, md, rc, dup);
  lua_call(L, 1, 1);
  if (!lua_isstring(L, -1))
    luaL_error(L,
               "ngx.re.gsub: the replace function returned a %s, not a "
               "string",
               luaL_typename(L, -1));
  luaL_addvalue(b);
}

/* gsub (max 0: every match) and sub (max 1). */
static int replace(lua_State *L, int max) {
  lua_settop(L, 4);
  size_t len, tl = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  bool fn = lua_isfunction(L, 3);
  const char *t = fn ? NULL : luaL_checklstring(L, 3, &tl);
  const char *flags = luaL_optstring(L, 4, "");
  bool dup;
  pcre2_code *code = compile(L, 2, flags, &dup);
  if (!code) return lt_ngx_fail3(L);
  lua_replace(L, 2); /* keep the regex alive while we work */
  pcre2_match_data **mdb = md_new(L, code), *md = *mdb;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t pos = 0;
  int count = 0;
  for (;;) {
    int rc = exec(L, code, s, len, pos, 0, md);
    if (rc < 0) {
      md_free(mdb);
      return lt_ngx_fail3(L);
    }
    if (rc == 0) break;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    luaL_addlstring(&b, s + pos, ov[0] - pos);
    if (fn) call_replace(L, &b, 3, code, s, md, rc, dup);
    else expand(L, &b, t, tl, code, s, ov, rc);
    count++;
    pos = ov[1];
    if (count == max) break;
    if (ov[1] == ov[0]) { /* empty: keep one character and go on */
      if (pos >= len) break;
      luaL_addchar(&b, s[pos++]);
    }
  }
  if (pos < len) luaL_addlstring(&b, s + pos, len - pos);
  md_free(mdb);
  luaL_pushresult(&b);
  lua_pushinteger(L, count);
  return 2;
}

static int l_gsub(lua_State *L) { return replace(L, 0); }
static int l_sub(lua_State *L) { return replace(L, 1); }

/* nil, err (the message on top). */
int lt_ngx_fail(lua_State *L) {
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

/* nil, nil, err (gsub's shape). */
int lt_ngx_fail3(lua_State *L) {
  lua_pushnil(L);
  lua_pushnil(L);
  lua_pushvalue(L, -3);
  return 3;
}

void lt_ngx_re_register(lua_State *L) {
  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, l_find);
  lua_setfield(L, -2, "find");
  lua_pushcfunction(L, l_match);
  lua_setfield(L, -2, "match");
  lua_pushcfunction(L, l_gsub);
  lua_setfield(L, -2, "gsub");
  lua_pushcfunction(L, l_sub);
  lua_setfield(L, -2, "sub");
  lua_setfield(L, -2, "re");
}
