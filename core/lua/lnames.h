/*
 * lnames.h - registered names and the reasons of recent deaths (lnames.c).
 */
#ifndef TY_LNAMES_H
#define TY_LNAMES_H

#include <stddef.h>

#include "sched/ty.h"

/* The process-wide name table. */
int lt_names_register(const char *name, ty_pid pid); /* 0 / -EEXIST */
ty_pid lt_names_lookup(const char *name);
/* Forgets every name of pid (cheap when pid has none). */
void lt_names_drop_pid(ty_pid pid);
void lt_names_clear(void);
/* One name of pid copied into buf (cut to n - 1 bytes); its length, 0 for
 * none. Cheap while no name exists at all. */
size_t lt_names_of(ty_pid pid, char *buf, size_t n);
/* A name as a number for the life of the process (0: too many names), and
 * the pid that holds that name now (0: none). */
uint32_t lt_names_atom(const char *name);
ty_pid lt_names_lookup_atom(uint32_t id);
/* The reasons of recent deaths, per worker. */
void lt_graves_open(unsigned workers);
void lt_graves_close(void);
/* On the actor's home worker, as it ends. */
void lt_grave_add(unsigned worker, ty_pid pid, const char *reason, size_t len);
/* A malloc'd copy of the reason pid ended with, or NULL (unknown, or
 * forgotten: then the answer is "noproc"). */
char *lt_grave_find(ty_pid pid, size_t *len);

#endif
