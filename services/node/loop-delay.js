'use strict';
// How late node's event loop ran, and how long V8's collector stopped it,
// since the last look: what each refusal pays twice, as its request is read
// late and its SHORT_WAIT_MS timer fires late (admission.js). Node's
// refusals took 57-60 ms at the median and 90-152 ms at p99 where flask's,
// the same policy, took 51-52 and 57-60 (issue 39); the refusals' log line
// says this lag beside their count, so a run shows what they waited for.
const { PerformanceObserver, monitorEventLoopDelay } = require('node:perf_hooks');

// The histogram's timer: its samples are this interval plus the lag.
const RESOLUTION_MS = 10;

class LoopDelay {
  #delays = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  #pauses = [];
  #collector = new PerformanceObserver((entries) => {
    for (const entry of entries.getEntries()) this.#pauses.push(entry.duration);
  });

  start() {
    this.#delays.enable();
    this.#collector.observe({ entryTypes: ['gc'] });
    return this;
  }

  stop() {
    this.#delays.disable();
    this.#collector.disconnect();
  }

  // The loop's lateness (p50, p99, max, in ms) and the collector's pauses
  // (how many, their total and longest, in ms) since the last call.
  sinceLast() {
    const lateMs = (ns) => Math.max(0, ns / 1e6 - RESOLUTION_MS);
    const seen = this.#delays.count > 0;
    const taken = {
      lateP50Ms: seen ? lateMs(this.#delays.percentile(50)) : 0,
      lateP99Ms: seen ? lateMs(this.#delays.percentile(99)) : 0,
      lateMaxMs: seen ? lateMs(this.#delays.max) : 0,
      gcPauses: this.#pauses.length,
      gcMs: this.#pauses.reduce((sum, ms) => sum + ms, 0),
      gcLongestMs: this.#pauses.reduce((longest, ms) => Math.max(longest, ms), 0),
    };
    this.#delays.reset();
    this.#pauses = [];
    return taken;
  }
}

// sinceLast()'s figures as a log line's clause.
function describeDelay({ lateP50Ms, lateP99Ms, lateMaxMs, gcPauses, gcMs, gcLongestMs }) {
  const ms = (value) => value.toFixed(0);
  return `event loop late p50 ${ms(lateP50Ms)} / p99 ${ms(lateP99Ms)} / max ${ms(lateMaxMs)} ms, `
    + `${gcPauses} GC pauses ${ms(gcMs)} ms (longest ${ms(gcLongestMs)} ms)`;
}

module.exports = { LoopDelay, RESOLUTION_MS, describeDelay };
