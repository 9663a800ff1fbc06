'use strict';
// The request deadline (REQUEST_DEADLINE_MS) put on MongoDB's work: a
// promise that has not settled by then is a DeadlinePassed, a 503.
const { REQUEST_DEADLINE_MS } = require('./settings');

class DeadlinePassed extends Error {}

// `promise`, or a DeadlinePassed rejection once `deadline` (Date.now()'s
// scale) has passed, whichever comes first. The MongoDB operation left
// behind ends by itself (socketTimeoutMS).
function beforeDeadline(promise, deadline) {
  let timer;
  const expired = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new DeadlinePassed(`REQUEST_DEADLINE_MS (${REQUEST_DEADLINE_MS} ms) passed`)),
      Math.max(0, deadline - Date.now()));
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

module.exports = { DeadlinePassed, beforeDeadline };
