/*
 * lcluster.h - the cluster layer as the module opener and the launcher see
 * it (lcluster.c).
 */
#ifndef LC_LCLUSTER_H
#define LC_LCLUSTER_H

#include <lua.h>

/* Adds node, nodes, monitor_node, demonitor_node, register_global,
 * whereis_global, join and leave to the table on top of L, and plugs the
 * cluster into tycho.config, tycho.run and tycho.stats. */
void lc_open_cluster(lua_State *L);

/* The launcher's --node, --nats and --cluster: NULL when the value is good,
 * else what is wrong with it. */
const char *lc_set_option(const char *key, const char *value);

#endif
