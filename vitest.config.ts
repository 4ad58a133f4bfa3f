// Test runner configuration: tests live in test/ and mirror src/. Two projects:
// `fast` for the edit-test loop (`npm run test:fast`) and `slow`, the tests
// that need minutes, namespaces or tshark; `npm test` runs both.
import { configDefaults, defineConfig } from 'vitest/config';

/** The slow tests: network namespaces, tshark differentials, long randomised tests. */
const SLOW = [
  // End-to-end in network namespaces (root, iproute2).
  'test/**/*.e2e.test.ts',
  'test/capture/pcap-live.test.ts',
  // Differential against tshark: thousands of frames, hundreds of tshark runs.
  'test/expr/tshark-differential.test.ts',
  'test/engine/replay-differential.test.ts',
  'test/geoip/tshark-geoip.test.ts',
  // Randomised: tens of thousands of generated expressions.
  'test/expr/reference.test.ts',
  // Hardening (#16): thousands of mutated captures, fuzzed expressions (time-budgeted) and configurations, with child processes.
  'test/hardening/captures.test.ts',
  'test/hardening/expressions.test.ts',
  'test/hardening/daemon-configs.test.ts',
];

export default defineConfig({
  test: {
    // The tshark differential test spawns many tshark processes; give it room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    projects: [
      { extends: true, test: { name: 'fast', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...SLOW] } },
      { extends: true, test: { name: 'slow', include: SLOW } },
    ],
  },
});
