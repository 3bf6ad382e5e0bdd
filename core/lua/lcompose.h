/*
 * lcompose.h - the binding's ops tables (lcompose.c), API floor.
 */
#ifndef TY_LCOMPOSE_H
#define TY_LCOMPOSE_H

#include "lactor.h"

extern const ty_actor_ops lt_actor_ops_all;
extern const lt_life_ops lt_life_all;

#endif
