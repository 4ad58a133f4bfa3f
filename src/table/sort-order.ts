// The sort under the address-table builder: a stable permutation of multi-word
// keys (IPv4: one uint32, IPv6: four) with the engine's native 64-bit typed-array
// sort, most significant word first.

const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/**
 * A permutation that sorts the keys (each `words` uint32 words, most
 * significant first) ascending; equal keys keep their input order.
 *
 * Most significant word first: the elements are sorted by (word << 32 | element)
 * as BigUint64 values with the engine's native typed-array sort (the 64-bit
 * values are written through a Uint32Array view, so no BigInt is created);
 * runs that share the word are then sorted by the next word, and so on. Random
 * IPv6 keys need one native sort, keys clustered in a few /32s two or three.
 * (A 16-bit LSD radix sort of 2M IPv6 keys was 3-4x slower here: its scatter
 * and gather passes miss the cache on every element.)
 */
export function sortOrder(keys: Uint32Array, words: number, n: number): Uint32Array {
  const perm = new Uint32Array(n);
  for (let i = 0; i < n; i++) perm[i] = i;
  if (n < 2) return perm;
  if (!LITTLE_ENDIAN) return fallbackOrder(keys, words, n);
  const wide = new BigUint64Array(n);
  const half = new Uint32Array(wide.buffer);
  // Runs still to sort at the current word: [start, end) pairs; the first is everything.
  let runs: number[] = [0, n];
  for (let w = 0; w < words && runs.length > 0; w++) {
    const next: number[] = [];
    for (let r = 0; r < runs.length; r += 2) {
      const start = runs[r]!;
      const end = runs[r + 1]!;
      for (let i = start; i < end; i++) {
        const e = perm[i]!;
        half[2 * i] = e;
        half[2 * i + 1] = keys[e * words + w]!;
      }
      wide.subarray(start, end).sort();
      // Read back the order, and find the runs of equal words: short ones are
      // finished here by insertion sort on the remaining words, long ones go to the next level.
      let runStart = start;
      for (let i = start; i <= end; i++) {
        if (i < end) perm[i] = half[2 * i]!;
        if (i === end || (i > start && half[2 * i + 1] !== half[2 * i - 1])) {
          const len = i - runStart;
          if (len > 1 && w + 1 < words) {
            if (len <= SMALL_RUN) insertionSort(perm, keys, words, w + 1, runStart, i);
            else next.push(runStart, i);
          }
          runStart = i;
        }
      }
    }
    runs = next;
  }
  return perm;
}

const SMALL_RUN = 16;

/** Sorts perm[start, end) by key words from..words-1 (ties by element index, as the wide sort does). */
function insertionSort(perm: Uint32Array, keys: Uint32Array, words: number, from: number, start: number, end: number): void {
  for (let i = start + 1; i < end; i++) {
    const e = perm[i]!;
    let j = i - 1;
    while (j >= start && keyAfter(keys, words, from, perm[j]!, e)) {
      perm[j + 1] = perm[j]!;
      j--;
    }
    perm[j + 1] = e;
  }
}

/** True when element a sorts after element b (words from..words-1, then index). */
function keyAfter(keys: Uint32Array, words: number, from: number, a: number, b: number): boolean {
  for (let k = from; k < words; k++) {
    const x = keys[a * words + k]!;
    const y = keys[b * words + k]!;
    if (x !== y) return x > y;
  }
  return a > b;
}

/** Comparator sort, for big-endian hosts. */
function fallbackOrder(keys: Uint32Array, words: number, n: number): Uint32Array {
  const idx = Array.from({ length: n }, (_, i) => i);
  idx.sort((a, b) => {
    for (let k = 0; k < words; k++) {
      const x = keys[a * words + k]!;
      const y = keys[b * words + k]!;
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  });
  return Uint32Array.from(idx);
}
