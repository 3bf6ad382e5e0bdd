/*
 * park.pml - a Promela model of tycho's park protocol (core/worker.c), for
 * spin. Checks that no wakeup is lost: a worker never sleeps while a message
 * it has not seen sits in its ring.
 *
 * Each side does a store then a load:
 *   sender:  publish the ring tail ; fence ; read the parker's state
 *            -> PARKED: CAS PARKED->NOTIFIED and write the eventfd
 *   parker:  store PARKED ; fence ; re-read the ring
 *            -> empty: sleep on the eventfd
 * x86 (TSO) and C11 release/acquire both let a store wait in a store buffer
 * while later loads go ahead; the model gives each thread a one-entry store
 * buffer that drains at any moment, or at a fence. Built with -DFENCE (what
 * the code does), spin finds no error; without it, spin finds the lost
 * wakeup, which shows that the model can fail. A lost wakeup is a parker
 * blocked on the eventfd after the sender has ended: an invalid end state.
 *
 *   spin -a -DFENCE park.pml && cc -o pan pan.c && ./pan -m100000
 */

#define RUNNING  0
#define PARKED   1
#define NOTIFIED 2
#define ROUNDS   2

byte tail = 0;          /* messages published (memory) */
byte state = RUNNING;   /* parker's park state (memory) */
byte efd = 0;           /* eventfd counter */
byte seen = 0;          /* messages the parker consumed */

/* store buffers: pending value, or 255 for empty */
byte sb_tail = 255;
byte sb_state = 255;

#define DRAIN_TAIL   atomic { sb_tail != 255 -> tail = sb_tail; sb_tail = 255 }
#define DRAIN_STATE  atomic { sb_state != 255 -> state = sb_state; sb_state = 255 }

#ifdef FENCE
#define FENCE_SENDER  do :: DRAIN_TAIL :: else -> break od
#define FENCE_PARKER  do :: DRAIN_STATE :: else -> break od
#else
#define FENCE_SENDER  skip
#define FENCE_PARKER  skip
#endif

/* the memory system drains buffers whenever it likes */
active proctype memory() {
end_mem:
  do
  :: DRAIN_TAIL
  :: DRAIN_STATE
  od
}

active proctype sender() {
  byte i = 0;
  byte st;
  do
  :: i < ROUNDS ->
     i++;
     sb_tail == 255;                 /* one store in flight at a time */
     sb_tail = i;                    /* publish (buffered) */
     FENCE_SENDER;
     st = state;
     if
     :: st == PARKED ->
        atomic { if :: state == PARKED -> state = NOTIFIED; efd++ :: else fi }
     :: else
     fi
  :: else -> break
  od
}

active proctype parker() {
  byte t;
end_loop:
  do
  :: seen == ROUNDS -> break
  :: else ->
     /* re-check before sleeping: consume what is visible */
     t = tail;
     if
     :: t > seen -> seen = t
     :: else ->
        sb_state == 255;
        sb_state = PARKED;           /* store PARKED (buffered) */
        FENCE_PARKER;
        t = tail;                    /* re-read the ring */
        if
        :: t > seen ->
           seen = t                  /* found it: do not sleep */
        :: else ->
           efd > 0;                  /* sleep until the eventfd fires */
           efd--
        fi;
        /* wake: exchange(RUNNING); the store drains through the buffer */
        do :: DRAIN_STATE :: else -> break od;
        state = RUNNING
     fi
  od;
  /* every message was seen */
  assert(seen == ROUNDS)
}

