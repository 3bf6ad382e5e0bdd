/*
 * test_list.c - the intrusive lists of core/base/list.h: pushes, appends
 * and unlinks from the front, the middle and the back keep both directions
 * consistent, and unlinking a node that is on no list leaves the list alone.
 */
#include <stddef.h>

#include "base/list.h"
#include "test.h"

typedef struct node {
  int v;
  struct node *next, *prev;
  struct node *gnext, *gprev; /* a second list the same nodes are on */
} node;

/* The values of the list from head, checked against the back links and
 * the tail (if given); -1 on an inconsistency. As a number: 1,2,3 -> 123. */
static long walk(node *head, node *tail) {
  long n = 0;
  node *prev = NULL;
  for (node *x = head; x; prev = x, x = x->next) {
    if (x->prev != prev) return -1;
    n = n * 10 + x->v;
  }
  if (tail && tail != prev) return -1;
  return n;
}

TEST_IMPL(list_ops) {
  node a = {.v = 1}, b = {.v = 2}, c = {.v = 3}, d = {.v = 4};
  node *head = NULL, *tail = NULL;
  TY_LIST_APPEND(&head, &tail, &a, next, prev);
  TY_LIST_APPEND(&head, &tail, &b, next, prev);
  TY_LIST_APPEND(&head, &tail, &c, next, prev);
  CHECK_EQ(walk(head, tail), 123);
  TY_LIST_UNLINK_TAIL(&head, &tail, &b, next, prev); /* the middle */
  CHECK_EQ(walk(head, tail), 13);
  TY_LIST_UNLINK_TAIL(&head, &tail, &c, next, prev); /* the back */
  CHECK_EQ(walk(head, tail), 1);
  TY_LIST_UNLINK_TAIL(&head, &tail, &a, next, prev); /* the last one */
  CHECK(head == NULL && tail == NULL);

  head = NULL;
  TY_LIST_PUSH(&head, &c, next, prev);
  TY_LIST_PUSH(&head, &b, next, prev);
  TY_LIST_PUSH(&head, &a, next, prev);
  CHECK_EQ(walk(head, NULL), 123);
  d.next = d.prev = NULL;
  TY_LIST_UNLINK(&head, &d, next, prev); /* on no list */
  CHECK_EQ(walk(head, NULL), 123);
  TY_LIST_UNLINK(&head, &a, next, prev); /* the front */
  CHECK_EQ(walk(head, NULL), 23);
  TY_LIST_UNLINK(&head, &c, next, prev);
  CHECK_EQ(walk(head, NULL), 2);

  /* Other link fields: the nodes on a second list, untouched by the first. */
  node *g = NULL;
  TY_LIST_PUSH(&g, &d, gnext, gprev);
  TY_LIST_PUSH(&g, &a, gnext, gprev);
  TY_LIST_UNLINK(&g, &d, gnext, gprev);
  CHECK(g == &a && a.gnext == NULL && a.gprev == NULL);
  CHECK_EQ(walk(head, NULL), 2);
  return 0;
}
