// Counting garbage collections around a piece of work, for the tests that say
// a hot path allocates nothing: the fewest GCs over several rounds (other work
// in the test process can cause one GC in a round, not in every round).
import { PerformanceObserver } from 'node:perf_hooks';

/** Runs `work` `rounds` times and returns the fewest garbage collections seen in one round. */
export async function fewestGcs(work: () => void, rounds = 3): Promise<number> {
  let gcs = 0;
  const observer = new PerformanceObserver((list) => {
    gcs += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  const settle = () => new Promise((r) => setTimeout(r, 50));
  let fewest = Infinity;
  try {
    for (let round = 0; round < rounds; round++) {
      await settle();
      gcs = 0;
      work();
      await settle();
      fewest = Math.min(fewest, gcs);
    }
  } finally {
    observer.disconnect();
  }
  return fewest;
}
