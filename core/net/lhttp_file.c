/*
 * lhttp_file.c - the files tycho.web's static routes send (lua/tycho/
 * web_static.lua): opened only inside their folder, and sent with
 * sendfile(2) straight from the page cache to the socket, never through a
 * Lua string while the socket takes them.
 *
 *   file_open(path, root) -> file, size, mtime | nil, "notfound"
 *   sendfile(conn, file, off, len) -> bytes sent now (0: the socket is
 *       full, or the connection cannot take a sendfile: TLS, or bytes
 *       still queued) | nil, err
 *   file_read(file, off, n) -> string   (the fallback: conn:write waits)
 *   file_range(file, off, len)   the part a response sends
 *   file_close(file)
 *
 * A response whose body is a file goes out with Content-Length len (and no
 * default Content-Type question: the route sets it); lua/tycho/http.lua
 * sends the bytes after the head.
 *
 * Why the fallback: the reactor has no "writable" wait; when the socket is
 * full, the next piece goes through conn:write, whose send op waits for
 * room (and meets the send timeout), and sendfile goes on after it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lhttp_impl.h"
#include "ltcp.h"

#define FILE_MT "tycho.http.file"

typedef struct hfile {
  int fd;
  double off, len; /* the part a response sends (file_range) */
} hfile;

bool lt_http_file_len(lua_State *L, int idx, double *len) {
  if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
    return false;
  luaL_getmetatable(L, FILE_MT);
  bool is = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  if (is) *len = ((hfile *)lua_touserdata(L, idx))->len;
  return is;
}

static hfile *check_file(lua_State *L, int idx) {
  hfile *f = luaL_checkudata(L, idx, FILE_MT);
  if (f->fd < 0) luaL_error(L, "tycho.http: the file is closed");
  return f;
}

static int notfound(lua_State *L) {
  lua_pushnil(L);
  lua_pushliteral(L, "notfound");
  return 2;
}

/* file_open(path, root): path's real location (symlinks resolved) must lie
 * inside root (a real path itself), and be a regular file. */
static int l_file_open(lua_State *L) {
  size_t pl, rl;
  const char *path = luaL_checklstring(L, 1, &pl);
  const char *root = luaL_checklstring(L, 2, &rl);
  if (memchr(path, '\0', pl)) return notfound(L);
  char *real = realpath(path, NULL);
  if (!real) return notfound(L);
  bool inside = strncmp(real, root, rl) == 0 &&
                (real[rl] == '/' || (rl == 1 && root[0] == '/'));
  int fd = inside ? open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
  free(real);
  if (fd < 0) return notfound(L);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return notfound(L);
  }
  hfile *f = lua_newuserdata(L, sizeof *f);
  f->fd = fd;
  f->off = 0;
  f->len = (double)st.st_size;
  luaL_getmetatable(L, FILE_MT);
  lua_setmetatable(L, -2);
  lua_pushnumber(L, (lua_Number)st.st_size);
  lua_pushnumber(L, (lua_Number)st.st_mtime);
  return 3;
}

/* realpath(path) -> the absolute path, symlinks resolved | nil, "notfound" */
static int l_realpath(lua_State *L) {
  size_t pl;
  const char *path = luaL_checklstring(L, 1, &pl);
  char *real = memchr(path, '\0', pl) ? NULL : realpath(path, NULL);
  if (!real) return notfound(L);
  lua_pushstring(L, real);
  free(real);
  return 1;
}

static int l_sendfile(lua_State *L) {
  lt_conn *c = lt_conn_test(L, 1);
  hfile *f = check_file(L, 2);
  off_t off = (off_t)luaL_checknumber(L, 3);
  size_t len = (size_t)luaL_checknumber(L, 4), sent = 0;
  if (!c || c->closed) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
  }
  /* Bytes queued on the send op go first: sendfile must not pass them. */
  if (c->tls || c->behind || ty__io_op_busy(&c->wop) || c->werr) {
    lua_pushinteger(L, 0);
    return 1;
  }
  while (sent < len) {
    ssize_t n = sendfile(c->fd, f->fd, &off, len - sent);
    if (n > 0) {
      sent += (size_t)n;
    } else if (n == 0) {
      break; /* the file shrank: the caller's read says so */
    } else if (errno != EINTR) {
      if (errno == EAGAIN) break;
      lua_pushnil(L);
      lua_pushstring(L, lt_net_errtok(-errno));
      return 2;
    }
  }
  lua_pushnumber(L, (lua_Number)sent);
  return 1;
}

static int l_file_read(lua_State *L) {
  hfile *f = check_file(L, 1);
  off_t off = (off_t)luaL_checknumber(L, 2);
  size_t n = (size_t)luaL_checknumber(L, 3);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (n > 0) {
    char *d = luaL_prepbuffer(&b);
    size_t want = n < LUAL_BUFFERSIZE ? n : LUAL_BUFFERSIZE;
    ssize_t r = pread(f->fd, d, want, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    luaL_addsize(&b, (size_t)r);
    off += r;
    n -= (size_t)r;
  }
  luaL_pushresult(&b);
  return 1;
}

/* file_range(file, off, len): the part a response with this body sends;
 * file_range(file) -> off, len. */
static int l_file_range(lua_State *L) {
  hfile *f = check_file(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_pushnumber(L, f->off);
    lua_pushnumber(L, f->len);
    return 2;
  }
  f->off = luaL_checknumber(L, 2);
  f->len = luaL_checknumber(L, 3);
  return 0;
}

static int l_file_close(lua_State *L) {
  hfile *f = luaL_checkudata(L, 1, FILE_MT);
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  return 0;
}

void lt_open_http_file(lua_State *L) {
  luaL_newmetatable(L, FILE_MT);
  lua_pushcfunction(L, l_file_close);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"file_open", l_file_open},
                                   {"sendfile", l_sendfile},
                                   {"file_read", l_file_read},
                                   {"file_close", l_file_close},
                                   {"file_range", l_file_range},
                                   {"realpath", l_realpath},
                                   {NULL, NULL}};
  luaL_register(L, NULL, funcs); /* into the table on top (_http) */
}
