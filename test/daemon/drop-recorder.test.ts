// The drop capture is size-capped and rotates: path, path.1, ... path.(files-1),
// and every file is a valid pcap holding whole records.
import { existsSync, mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PcapReader } from '../../src/capture/index.js';
import { DropRecorder } from '../../src/daemon/index.js';

function frames(path: string): number[] {
  const r = PcapReader.open(path);
  const seen: number[] = [];
  while (r.next()) seen.push(r.data[r.offset]!);
  r.close();
  return seen;
}

describe('the drop recorder', () => {
  it('rotates at the size cap, keeps the configured number of files, and loses no recent frame', () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-drops-'));
    const path = join(dir, 'dropped.pcap');
    // 100-byte frames: 116 bytes per record, 24 per file header; 4096 bytes hold 35 records.
    const rec = new DropRecorder({ path, maxBytes: 4096, files: 3, linkType: 1 });
    const frame = new Uint8Array(100);
    for (let i = 0; i < 200; i++) {
      frame[0] = i;
      rec.write(frame, frame.length, 1_700_000_000_000_000_000n + BigInt(i));
    }
    rec.close();
    expect(existsSync(path)).toBe(true);
    expect(existsSync(`${path}.1`)).toBe(true);
    expect(existsSync(`${path}.2`)).toBe(true);
    expect(existsSync(`${path}.3`)).toBe(false);
    for (const f of [path, `${path}.1`, `${path}.2`]) expect(statSync(f).size).toBeLessThanOrEqual(4096);
    // Oldest to newest, the kept files hold one run of consecutive frames ending with the last one.
    const kept = [...frames(`${path}.2`), ...frames(`${path}.1`), ...frames(path)];
    expect(kept[kept.length - 1]).toBe(199);
    kept.forEach((v, i) => i > 0 && expect(v).toBe((kept[i - 1]! + 1) % 256));
    expect(rec.rotations).toBe(Math.ceil(200 / 35) - 1);
  });
});
