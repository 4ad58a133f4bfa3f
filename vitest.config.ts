// Test runner configuration: tests live in test/ and mirror src/.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The tshark differential test spawns many tshark processes; give it room.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
