/*
 * list.h - intrusive doubly linked lists, NULL at both ends: the node
 * carries its own link fields (named by the caller: next/prev, or
 * gnext/gprev for a second list the same node is on), the list is a head
 * pointer (and a tail pointer where one is kept). One unlink, written
 * once, for the lists of the pool, the shared table, the scheduler's
 * message timers and the network's waiters, listeners and connections.
 *
 *   TY_LIST_PUSH(&head, n, next, prev)            n first
 *   TY_LIST_APPEND(&head, &tail, n, next, prev)   n last
 *   TY_LIST_UNLINK(&head, n, next, prev)          n out
 *   TY_LIST_UNLINK_TAIL(&head, &tail, n, next, prev)
 *
 * They are macros so that any node type works; head, tail and n are
 * evaluated more than once (pass plain names). An unlink leaves n's own
 * links as they were: reset them when "not listed" is read from them.
 * The unlink of a first node changes the head only if n is the head, so
 * unlinking a node that is on no list leaves the list alone.
 */
#ifndef TY_LIST_H
#define TY_LIST_H

#define TY_LIST_PUSH(head, n, next, prev)                                      \
  do {                                                                         \
    (n)->prev = NULL;                                                          \
    (n)->next = *(head);                                                       \
    if (*(head)) (*(head))->prev = (n);                                        \
    *(head) = (n);                                                             \
  } while (0)

#define TY_LIST_APPEND(head, tail, n, next, prev)                              \
  do {                                                                         \
    (n)->next = NULL;                                                          \
    (n)->prev = *(tail);                                                       \
    if (*(tail)) (*(tail))->next = (n);                                        \
    else *(head) = (n);                                                        \
    *(tail) = (n);                                                             \
  } while (0)

#define TY_LIST_UNLINK(head, n, next, prev)                                    \
  do {                                                                         \
    if ((n)->prev) (n)->prev->next = (n)->next;                                \
    else if (*(head) == (n)) *(head) = (n)->next;                              \
    if ((n)->next) (n)->next->prev = (n)->prev;                                \
  } while (0)

#define TY_LIST_UNLINK_TAIL(head, tail, n, next, prev)                         \
  do {                                                                         \
    if ((n)->prev) (n)->prev->next = (n)->next;                                \
    else if (*(head) == (n)) *(head) = (n)->next;                              \
    if ((n)->next) (n)->next->prev = (n)->prev;                                \
    else if (*(tail) == (n)) *(tail) = (n)->prev;                              \
  } while (0)

#endif
