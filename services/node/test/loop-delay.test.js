'use strict';
// loop-delay.js against a loop held busy for a time measured here, and a
// collection forced here: `node --test services/node/test/`.
const assert = require('node:assert/strict');
const { setTimeout: sleep } = require('node:timers/promises');
const test = require('node:test');
const v8 = require('node:v8');
const vm = require('node:vm');
const { LoopDelay, RESOLUTION_MS, describeDelay } = require('../loop-delay');

// Holds the event loop for about `ms`; how long it held it.
function holdLoop(ms) {
  const start = performance.now();
  while (performance.now() - start < ms);
  return performance.now() - start;
}

test('a loop held busy shows as that late, then the next look starts afresh', async () => {
  const delay = new LoopDelay().start();
  try {
    await sleep(3 * RESOLUTION_MS); // the histogram's timer running
    const heldMs = holdLoop(20 * RESOLUTION_MS);
    await sleep(3 * RESOLUTION_MS); // its timer fires, late by what was held
    const busy = delay.sinceLast();
    // Its sample spans the hold and the interval's start before it.
    assert.ok(busy.lateMaxMs >= heldMs - RESOLUTION_MS, `${busy.lateMaxMs} ms late, held ${heldMs} ms`);
    assert.ok(busy.lateP50Ms <= busy.lateP99Ms && busy.lateP99Ms <= busy.lateMaxMs, JSON.stringify(busy));
    await sleep(10 * RESOLUTION_MS);
    const after = delay.sinceLast();
    assert.ok(after.lateMaxMs < heldMs / 2, `the hold seen again: ${JSON.stringify(after)}`);
  } finally {
    delay.stop();
  }
});

test("the collector's pauses are counted with their time, once", async () => {
  v8.setFlagsFromString('--expose-gc');
  const collect = vm.runInNewContext('gc');
  const delay = new LoopDelay().start();
  try {
    delay.sinceLast();
    collect();
    collect();
    await sleep(RESOLUTION_MS); // observers hear of entries after the current task
    const seen = delay.sinceLast();
    assert.ok(seen.gcPauses >= 2, JSON.stringify(seen));
    assert.ok(seen.gcMs > 0 && seen.gcLongestMs > 0 && seen.gcLongestMs <= seen.gcMs, JSON.stringify(seen));
    assert.equal(delay.sinceLast().gcPauses, 0);
  } finally {
    delay.stop();
  }
});

test('the figures read as one clause of a log line', () => {
  const line = describeDelay({ lateP50Ms: 8.2, lateP99Ms: 61.5, lateMaxMs: 97, gcPauses: 3, gcMs: 4.4, gcLongestMs: 2.6 });
  assert.equal(line, 'event loop late p50 8 / p99 62 / max 97 ms, 3 GC pauses 4 ms (longest 3 ms)');
});
