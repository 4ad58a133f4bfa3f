// The `sip` field: is a UDP payload a SIP message? A message is valid when its
// start line is a request line (`METHOD SP Request-URI SP SIP/2.0 CRLF`) or a
// status line (`SIP/2.0 SP 3DIGIT SP ...`), RFC 3261 §7.1 and §7.2. Checked
// byte by byte, without building strings.

// "SIP/2.0" as bytes.
const VERSION = [0x53, 0x49, 0x50, 0x2f, 0x32, 0x2e, 0x30];

function isVersionAt(buf: Uint8Array, i: number, end: number): boolean {
  if (i + VERSION.length > end) return false;
  for (let k = 0; k < VERSION.length; k++) if (buf[i + k] !== VERSION[k]) return false;
  return true;
}

function isTokenChar(c: number): boolean {
  // RFC 3261 token: alphanum and -.!%*_+`'~
  return (
    (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) ||
    c === 0x2d || c === 0x2e || c === 0x21 || c === 0x25 || c === 0x2a || c === 0x5f || c === 0x2b ||
    c === 0x60 || c === 0x27 || c === 0x7e
  );
}

/** True when [off, end) starts with a SIP request or status line ending in CRLF. */
export function isSip(buf: Uint8Array, off: number, end: number): boolean {
  // Look for the end of the first line within a sane bound.
  const limit = Math.min(end, off + 1024);
  let eol = -1;
  for (let i = off; i + 1 < limit; i++) {
    if (buf[i] === 0x0d && buf[i + 1] === 0x0a) {
      eol = i;
      break;
    }
  }
  if (eol < 0) return false;
  if (isVersionAt(buf, off, eol)) {
    // Status-Line: SIP/2.0 SP 3DIGIT SP Reason-Phrase
    const p = off + VERSION.length;
    if (p + 4 > eol || buf[p] !== 0x20) return false;
    for (let k = 1; k <= 3; k++) {
      const c = buf[p + k]!;
      if (c < 0x30 || c > 0x39) return false;
    }
    return p + 4 === eol || buf[p + 4] === 0x20;
  }
  // Request-Line: Method SP Request-URI SP SIP-Version
  let i = off;
  while (i < eol && isTokenChar(buf[i]!)) i++;
  if (i === off || buf[i] !== 0x20) return false;
  const uriStart = ++i;
  while (i < eol && buf[i] !== 0x20) i++;
  if (i === uriStart || i >= eol) return false;
  // The Request-URI has a scheme (sip:, sips:, tel:, ...).
  let colon = false;
  for (let k = uriStart; k < i; k++) if (buf[k] === 0x3a) colon = true;
  return colon && i + 1 + VERSION.length === eol && isVersionAt(buf, i + 1, eol);
}
