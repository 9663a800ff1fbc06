'use strict';
// Bounded places taken in turn (the MongoDB slots and the open streams of
// serve-file.js), each given back at the latest when its response closes.

// A counting semaphore whose waiters are served first come, first served,
// those that ask as `urgent` before the others.
class Semaphore {
  #free;
  // A Set iterates in insertion order (FIFO) and lets a waiter leave in O(1).
  #urgent = new Set();
  #waiters = new Set();

  constructor(count) {
    this.#free = count;
  }

  // Resolves to the slot's release function (idempotent), or to null when
  // no slot freed within timeoutMs or `signal` aborted first.
  acquire(timeoutMs, signal, urgent = false) {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#releaser());
    }
    if (signal.aborted) return Promise.resolve(null);
    const queue = urgent ? this.#urgent : this.#waiters;
    return new Promise((resolve) => {
      const settle = (release) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', leave);
        queue.delete(grant);
        resolve(release);
      };
      const grant = () => settle(this.#releaser());
      const leave = () => settle(null);
      const timer = setTimeout(leave, timeoutMs);
      signal.addEventListener('abort', leave, { once: true });
      queue.add(grant);
    });
  }

  #releaser() {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // Handed straight to the oldest waiter, so that a newcomer cannot take it first.
      const [oldest] = this.#urgent.size > 0 ? this.#urgent : this.#waiters;
      if (oldest === undefined) this.#free++;
      else oldest();
    };
  }
}

// A place in `slots` for this response, in turn: its release function,
// called at the latest when the response closes, or null when none freed
// within waitMs or the client left while waiting (it leaves the queue).
async function takeSlot(slots, res, waitMs) {
  if (res.destroyed) return null;
  const clientGone = new AbortController();
  const abort = () => clientGone.abort();
  res.once('close', abort);
  const release = await slots.acquire(waitMs, clientGone.signal);
  res.off('close', abort);
  if (release === null) return null;
  if (res.destroyed) { // granted after the client left
    release();
    return null;
  }
  res.once('close', release);
  return release;
}

module.exports = { Semaphore, takeSlot };
