// The ring engine's ports (src/capture/ring-port.ts) where no namespace is
// needed: whether the engine can run, and the errors of a bad open. The
// traffic tests are in ring-port.e2e.test.ts.
import { describe, expect, it } from 'vitest';
import { MoatError } from '../../src/errors/index.js';
import { openRingPort, ringEngineAvailable } from '../../src/capture/ring-port.js';

describe('ring ports without a namespace', () => {
  it('says whether the engine can run here, and why not', () => {
    const why = ringEngineAvailable();
    if (process.getuid?.() === 0) expect(why).toBeUndefined();
    else expect(why).toMatch(/CAP_NET_RAW|addon/);
  });

  it('refuses bad options with 3012 naming the option', () => {
    const err = (f: () => unknown): MoatError => {
      try {
        f();
      } catch (e) {
        return e as MoatError;
      }
      throw new Error('expected an exception');
    };
    expect(err(() => openRingPort('lo', { slotBytes: 1000 }))).toMatchObject({ code: 3012, message: expect.stringMatching(/slotBytes/) });
    expect(err(() => openRingPort('lo', { ringBytes: 1000 }))).toMatchObject({ code: 3012, message: expect.stringMatching(/ringBytes/) });
    expect(err(() => openRingPort('lo', { batchMax: 0 }))).toMatchObject({ code: 3012, message: expect.stringMatching(/batchMax/) });
    expect(err(() => openRingPort('lo', { fanoutGroup: 70_000 }))).toMatchObject({ code: 3012, message: expect.stringMatching(/fanoutGroup/) });
  });

  it('refuses an unknown interface with 3009', () => {
    const e = (() => {
      try {
        openRingPort('moat-no-such0', {});
      } catch (err) {
        return err as MoatError;
      }
      return undefined;
    })();
    expect(e).toBeInstanceOf(MoatError);
    expect(e?.code).toBe(3009);
  });
});
