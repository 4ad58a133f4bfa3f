// Hot modules copy slot numbers and constants as literals (packet/literal.ts);
// each checks its copies when it loads. The check itself must refuse a copy
// that disagrees with its source.
import { describe, expect, it } from 'vitest';
import { checkCopies } from '../../src/packet/literal.js';
import * as SLOTS from '../../src/packet/slots.js';

describe('literal copies of slots', () => {
  it('accepts copies equal to their source and refuses one that differs, naming it', () => {
    expect(() => checkCopies('m', SLOTS, { TCP_DSTPORT: SLOTS.TCP_DSTPORT, IP_SRC: SLOTS.IP_SRC })).not.toThrow();
    expect(() => checkCopies('m', SLOTS, { TCP_DSTPORT: SLOTS.TCP_DSTPORT + 1 })).toThrow(/m: the copy of TCP_DSTPORT/);
    expect(() => checkCopies('m', SLOTS, { NO_SUCH_SLOT: 0 })).toThrow(/NO_SUCH_SLOT/);
  });

  it('lets the modules that copy them load (their copies agree)', async () => {
    await expect(import('../../src/packet/index.js')).resolves.toBeDefined();
    await expect(import('../../src/engine/packet-path.js')).resolves.toBeDefined();
    await expect(import('../../src/engine/lazy-lookups.js')).resolves.toBeDefined();
  });
});
