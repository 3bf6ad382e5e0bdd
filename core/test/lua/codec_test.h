/*
 * codec_test.h - what the codec's test files share: the Lua state and the
 * buffer that the runner (test_codec.c) gives each test fresh, and the
 * helpers defined there; the tests are in test_codec_cases.c.
 */
#ifndef TY_TEST_CODEC_TEST_H
#define TY_TEST_CODEC_TEST_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include "base/buf.h"

extern lua_State *L;
extern ty__buf B;

int run_lua(const char *code);
unsigned rnd(unsigned n);
bool num_eq(lua_Number x, lua_Number y);
int count_keys(int t);
bool deq(int a, int b, int depth);
bool list_eq(int a, int b, int n);
int check_roundtrip(int first, int n);
int check_error(int first, int n, const char *want);
int check_decode_safe(const char *data, size_t len);
int check_corruptions(const char *data, size_t len);
void gen_value(int depth, bool allow_nil);
void gen_table(int depth);

#endif
