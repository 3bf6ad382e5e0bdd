/*
 * natsapi.h - nats.c, loaded when a node joins a cluster (natsapi.c).
 *
 * The single-node runtime must not need libnats: core.so and the launcher
 * are not linked with it. The cluster layer is compiled against nats.h for
 * its types, and calls every nats.c function through a table of pointers
 * that lc_nats_load fills with dlopen/dlsym the first time a node joins.
 * A call reads N(natsConnection_Publish)(nc, subj, data, len): the pointer
 * has the exact type of the function nats.h declares. Only core/cluster
 * includes this header (scripts/layers.sh keeps nats.h out of lower layers
 * by keeping the include path here).
 */
#ifndef LC_NATSAPI_H
#define LC_NATSAPI_H

#include <stddef.h>

#include <nats/nats.h>

/* Every nats.c function the cluster layer uses. */
#define LC_NATS_FUNCS(X)                                                       \
  X(natsOptions_Create)                                                        \
  X(natsOptions_Destroy)                                                       \
  X(natsOptions_SetURL)                                                        \
  X(natsOptions_SetServers)                                                    \
  X(natsOptions_SetName)                                                       \
  X(natsOptions_SetTimeout)                                                    \
  X(natsOptions_SetEventLoop)                                                  \
  X(natsOptions_SetSendAsap)                                                   \
  X(natsOptions_SetIOBufSize)                                                  \
  X(natsOptions_SetMaxReconnect)                                               \
  X(natsOptions_SetReconnectWait)                                              \
  X(natsOptions_SetReconnectJitter)                                            \
  X(natsOptions_SetReconnectBufSize)                                           \
  X(natsOptions_SetPingInterval)                                               \
  X(natsOptions_SetMaxPingsOut)                                                \
  X(natsOptions_SetNoEcho)                                                     \
  X(natsOptions_SetReconnectedCB)                                              \
  X(natsOptions_SetNoRandomize)                                                \
  X(natsConnection_Connect)                                                    \
  X(natsConnection_Close)                                                      \
  X(natsConnection_Destroy)                                                    \
  X(natsConnection_ProcessReadEvent)                                           \
  X(natsConnection_ProcessWriteEvent)                                          \
  X(natsConnection_Publish)                                                    \
  X(natsConnection_Buffered)                                                   \
  X(natsConnection_Status)                                                     \
  X(natsConnection_GetMaxPayload)                                              \
  X(natsConnection_GetServers)                                                 \
  X(natsConnection_GetStats)                                                   \
  X(natsConnection_FlushTimeout)                                               \
  X(natsConnection_SubscribeSync)                                              \
  X(natsConnection_QueueSubscribeSync)                                         \
  X(natsStatistics_Create)                                                     \
  X(natsStatistics_GetCounts)                                                  \
  X(natsStatistics_Destroy)                                                    \
  X(natsSubscription_NextMsg)                                                  \
  X(natsSubscription_GetPending)                                               \
  X(natsSubscription_SetPendingLimits)                                         \
  X(natsSubscription_GetDropped)                                               \
  X(natsSubscription_Unsubscribe)                                              \
  X(natsSubscription_DrainTimeout)                                             \
  X(natsSubscription_IsValid)                                                  \
  X(natsSubscription_Destroy)                                                  \
  X(natsMsg_GetSubject)                                                        \
  X(natsMsg_GetData)                                                           \
  X(natsMsg_GetDataLength)                                                     \
  X(natsMsg_Destroy)                                                           \
  X(natsStatus_GetText)                                                        \
  X(nats_GetLastError)                                                         \
  X(natsConnection_JetStream)                                                  \
  X(jsCtx_Destroy)                                                             \
  X(jsOptions_Init)                                                            \
  X(kvConfig_Init)                                                             \
  X(js_CreateKeyValue)                                                         \
  X(kvStore_Destroy)                                                           \
  X(kvStore_Get)                                                               \
  X(kvStore_Create)                                                            \
  X(kvStore_Update)                                                            \
  X(kvEntry_Value)                                                             \
  X(kvEntry_ValueLen)                                                          \
  X(kvEntry_Revision)                                                          \
  X(kvEntry_Operation)                                                         \
  X(kvEntry_Destroy)

typedef struct lc_nats_api {
#define LC_NATS_PTR(f) __typeof__(f) *f;
  LC_NATS_FUNCS(LC_NATS_PTR)
#undef LC_NATS_PTR
} lc_nats_api;

extern lc_nats_api lc_nats;

/* A nats.c function, through the table. */
#define N(f) (lc_nats.f)

/* Loads libnats (once per process; later calls return the first outcome).
 * 0, or -1 with a message in err. Any thread. */
int lc_nats_load(char *err, size_t errlen);

/* The server URLs of a setting, comma-separated ("nats://a:4222,nats://b:
 * 4222", spaces around commas allowed), into o: natsOptions_SetURL takes
 * one URL only. */
natsStatus lc_nats_set_urls(natsOptions *o, const char *urls);

#endif
