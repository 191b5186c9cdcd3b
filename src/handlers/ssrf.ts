// The SSRF guard for the built-in http task (DESIGN §10). A tenant chooses the
// URL and the Worker fetches it, so a URL must never reach the Worker's own
// neighbourhood: loopback, private and link-local networks, cloud metadata
// services, or names that only resolve inside a network.
//
// What it checks: the scheme (http/https only), userinfo (refused: credentials
// belong in headers, and `user@host` is a classic way to hide the real host
// from a careless reader), and the host, whether it is a name or an address in
// any spelling. The WHATWG URL parser (Node and workerd alike) already turns
// decimal, octal, hex, short, percent-encoded and full-width IPv4 spellings
// into dotted decimal and compresses IPv6; we rely on that, and still parse
// what it leaves (a host with trailing dots such as `127.0.0.1..` stays a
// "name", yet a resolver's inet_aton would read it as an address).
//
// What it cannot check: a public DNS name that resolves to a private address
// (`127.0.0.1.nip.io`, DNS rebinding). Workers have no DNS API, so the name is
// resolved by the fetch itself; in production Cloudflare's fetch refuses
// private and internal destinations. In Node (tests, local use) nothing stops
// it, which is why local use turns the guard off with ALLOW_PRIVATE_TARGETS.
//
// Ports: 80 and 443 (the URL's default for its scheme counts as one of them),
// plus those listed in ALLOWED_TARGET_PORTS; any other port is refused, so a
// tenant cannot aim deliveries at a mail, database or admin port of a public
// host. With ALLOW_PRIVATE_TARGETS (local development, where receivers listen
// on random ports) every port is allowed.

export type TargetCheck = { ok: true; url: URL } | { ok: false; reason: string };

/** Names of cloud metadata services (Google, AWS, Tencent...), refused whatever they resolve to. */
const METADATA_NAMES = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.tencentyun.com',
  'metadata.azure.internal',
]);

/**
 * Suffixes that never name a public host: special-use names (RFC 6761, 6762,
 * 8375, 9476), `.internal` (reserved for private use by ICANN), and the TLDs
 * ICANN will not delegate because private networks already use them.
 */
const PRIVATE_SUFFIXES = [
  'localhost',
  'localdomain',
  'local',
  'internal',
  'arpa', // home.arpa, and reverse-lookup names: never a webhook receiver
  'test',
  'invalid',
  'example',
  'onion',
  'alt',
  'lan',
  'home',
  'corp',
  'intranet',
  'private',
];

/** IPv4 ranges that are not globally reachable (IANA special-purpose registry). */
const IPV4_BLOCKED: readonly (readonly [cidr: string, what: string])[] = [
  ['0.0.0.0/8', 'unspecified ("this network") address'],
  ['10.0.0.0/8', 'private address (RFC 1918)'],
  ['100.100.100.200/32', 'cloud metadata address (Alibaba)'],
  ['100.64.0.0/10', 'carrier-grade NAT address (RFC 6598)'],
  ['127.0.0.0/8', 'loopback address'],
  ['169.254.169.254/32', 'cloud metadata address'],
  ['169.254.0.0/16', 'link-local address'],
  ['172.16.0.0/12', 'private address (RFC 1918)'],
  ['192.0.0.0/24', 'IETF protocol assignment address'],
  ['192.0.2.0/24', 'documentation address (TEST-NET-1)'],
  ['192.88.99.0/24', '6to4 relay anycast address (deprecated)'],
  ['192.168.0.0/16', 'private address (RFC 1918)'],
  ['198.18.0.0/15', 'benchmarking address'],
  ['198.51.100.0/24', 'documentation address (TEST-NET-2)'],
  ['203.0.113.0/24', 'documentation address (TEST-NET-3)'],
  ['224.0.0.0/4', 'multicast address'],
  ['255.255.255.255/32', 'broadcast address'],
  ['240.0.0.0/4', 'reserved address'],
];

const IPV4_RANGES = IPV4_BLOCKED.map(([cidr, what]) => {
  const [addr = '', bits = '32'] = cidr.split('/');
  const prefix = Number(bits);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { base: (parseIPv4Loose(addr) ?? 0) & mask, mask, what };
});

/**
 * Checks that `url` is an http(s) URL whose host is a public destination.
 * With `allowPrivate` (local development) any host is accepted, but the
 * scheme and userinfo rules still hold.
 */
export function checkTarget(url: string, options: { allowPrivate: boolean; allowedPorts?: readonly number[] }): TargetCheck {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { ok: false, reason: 'not a valid absolute URL' };
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return { ok: false, reason: `scheme ${parsed.protocol} is not allowed (only http: and https:)` };
  }
  if (parsed.username !== '' || parsed.password !== '') {
    return { ok: false, reason: 'credentials in the URL are not allowed (send them in headers)' };
  }
  if (parsed.hostname === '') return { ok: false, reason: 'the URL has no host' };
  if (options.allowPrivate) return { ok: true, url: parsed };
  const refusal = classifyHost(parsed.hostname);
  if (refusal !== null) return { ok: false, reason: `host ${parsed.hostname} is refused: ${refusal}` };
  // An empty port is the scheme's default (80 or 443): the parser drops an explicit default.
  if (parsed.port !== '') {
    const port = Number(parsed.port);
    if (port !== 80 && port !== 443 && !(options.allowedPorts ?? []).includes(port)) {
      return { ok: false, reason: `port ${port} is not allowed (80, 443${(options.allowedPorts ?? []).map((p) => `, ${p}`).join('')}; see ALLOWED_TARGET_PORTS)` };
    }
  }
  return { ok: true, url: parsed };
}

/** Why a URL's hostname is not a public destination, or null when it is. */
function classifyHost(hostname: string): string | null {
  if (hostname.startsWith('[')) {
    const bytes = parseIPv6(hostname.slice(1, -1));
    return bytes ? classifyIPv6(bytes) : 'malformed IPv6 address';
  }
  // A resolver ignores trailing dots ("localhost." is localhost) and so must we.
  const name = hostname.toLowerCase().replace(/\.+$/, '');
  if (name === '') return 'empty host name';

  // All-numeric labels mean a resolver would read it as an IPv4 address in
  // inet_aton's spellings, even where the URL parser did not.
  const labels = name.split('.');
  if (labels.every((l) => /^(0x[0-9a-f]*|\d+)$/.test(l))) {
    const v4 = parseIPv4Loose(name);
    return v4 === null ? 'ambiguous numeric host' : classifyIPv4(v4);
  }
  if (METADATA_NAMES.has(name)) return 'cloud metadata service';
  for (const suffix of PRIVATE_SUFFIXES) {
    if (name === suffix || name.endsWith(`.${suffix}`)) return `.${suffix} names are not public`;
  }
  // A single-label name is completed by the resolver's search domains: it can
  // only mean a host inside the local network.
  if (labels.length === 1) return 'single-label host names resolve inside the local network';
  if (labels.some((l) => l === '')) return 'empty label in host name';
  return null;
}

/**
 * Parses IPv4 the way inet_aton and the WHATWG URL parser do: one to four
 * parts, each decimal, octal (leading 0) or hex (0x); the last part fills the
 * remaining bytes. Returns the address as an unsigned 32-bit number.
 */
function parseIPv4Loose(text: string): number | null {
  const parts = text.split('.');
  if (parts.length === 0 || parts.length > 4) return null;
  const values: number[] = [];
  for (const part of parts) {
    let value: number;
    if (/^0x[0-9a-f]*$/i.test(part)) value = part.length === 2 ? 0 : parseInt(part.slice(2), 16);
    else if (/^0[0-7]*$/.test(part)) value = part.length === 1 ? 0 : parseInt(part.slice(1), 8);
    else if (/^[1-9]\d*$/.test(part)) value = Number(part);
    else return null;
    if (!Number.isFinite(value)) return null;
    values.push(value);
  }
  const last = values.pop() ?? 0;
  if (values.some((v) => v > 255)) return null;
  if (last >= 256 ** (4 - values.length)) return null;
  let address = 0;
  values.forEach((v, i) => {
    address += v * 256 ** (3 - i);
  });
  return address + last;
}

function classifyIPv4(address: number): string | null {
  for (const range of IPV4_RANGES) {
    if (((address & range.mask) >>> 0) === range.base >>> 0) return range.what;
  }
  return null;
}

const ipv4At = (bytes: Uint8Array, offset: number) =>
  (((bytes[offset] ?? 0) << 24) | ((bytes[offset + 1] ?? 0) << 16) | ((bytes[offset + 2] ?? 0) << 8) | (bytes[offset + 3] ?? 0)) >>> 0;

/** fd00:ec2::254, the AWS metadata service over IPv6 (inside fc00::/7, named for a clearer refusal). */
const AWS_METADATA_V6 = Uint8Array.from([0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54]);

const startsWith = (bytes: Uint8Array, prefix: readonly number[]) => prefix.every((b, i) => bytes[i] === b);

/**
 * IPv6 is judged by allow-list: only global unicast (2000::/3) minus its
 * special blocks is public. Forms that embed an IPv4 address (mapped, NAT64,
 * 6to4) are judged by that address, because that is where the packet goes.
 */
function classifyIPv6(bytes: Uint8Array): string | null {
  const zeroUpTo = (n: number) => bytes.subarray(0, n).every((b) => b === 0);
  const embedded = (offset: number, form: string) => {
    const why = classifyIPv4(ipv4At(bytes, offset));
    return why === null ? null : `${form} embedding a ${why}`;
  };
  if (zeroUpTo(16)) return 'unspecified address';
  if (zeroUpTo(15) && bytes[15] === 1) return 'loopback address';
  if (zeroUpTo(10) && bytes[10] === 0xff && bytes[11] === 0xff) return embedded(12, 'IPv4-mapped IPv6 address');
  // ::ffff:0:a.b.c.d, the SIIT "IPv4-translated" form (RFC 2765).
  if (zeroUpTo(8) && bytes[8] === 0xff && bytes[9] === 0xff && bytes[10] === 0 && bytes[11] === 0) {
    return embedded(12, 'IPv4-translated IPv6 address');
  }
  if (zeroUpTo(12)) return 'IPv4-compatible IPv6 address (deprecated)';
  if (startsWith(bytes, [0, 0x64, 0xff, 0x9b]) && bytes.subarray(4, 12).every((b) => b === 0)) {
    return embedded(12, 'NAT64 address');
  }
  if (startsWith(bytes, [0, 0x64, 0xff, 0x9b, 0, 1])) return 'local-use NAT64 address (RFC 8215)';
  if (bytes.every((b, i) => b === AWS_METADATA_V6[i])) return 'cloud metadata address (AWS)';
  const first = bytes[0] ?? 0;
  if ((first & 0xfe) === 0xfc) return 'unique-local address (fc00::/7)';
  if (first === 0xfe && ((bytes[1] ?? 0) & 0xc0) === 0x80) return 'link-local address (fe80::/10)';
  if (first === 0xfe && ((bytes[1] ?? 0) & 0xc0) === 0xc0) return 'site-local address (deprecated)';
  if (first === 0xff) return 'multicast address';
  if ((first & 0xe0) !== 0x20) return 'reserved address (outside global unicast 2000::/3)';
  if (startsWith(bytes, [0x20, 0x02])) return embedded(2, '6to4 address');
  // 2001::/23 holds Teredo, benchmarking, ORCHID and other protocol blocks.
  if (first === 0x20 && bytes[1] === 0x01 && ((bytes[2] ?? 0) & 0xfe) === 0) return 'IETF protocol assignment address (2001::/23)';
  if (startsWith(bytes, [0x20, 0x01, 0x0d, 0xb8])) return 'documentation address (2001:db8::/32)';
  if (first === 0x3f && bytes[1] === 0xff && ((bytes[2] ?? 0) & 0xf0) === 0) return 'documentation address (3fff::/20)';
  return null;
}

/** Parses an IPv6 address (with `::` and an optional trailing dotted quad) into 16 bytes. */
function parseIPv6(text: string): Uint8Array | null {
  if (text.includes('%')) return null; // a zone id names a local interface
  // Rewrite a trailing dotted quad (::ffff:127.0.0.1) as its two hex groups.
  const quad = /^(.*:)(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  let hex = text;
  if (quad) {
    const octets = quad.slice(2, 6).map(Number);
    if (octets.some((o) => o > 255)) return null;
    const [a = 0, b = 0, c = 0, d = 0] = octets;
    hex = `${quad[1]}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = hex.split('::');
  if (halves.length > 2) return null;
  const groupsOf = (s: string) => (s === '' ? [] : s.split(':'));
  const left = groupsOf(halves[0] ?? '');
  const right = groupsOf(halves[1] ?? '');
  if (![...left, ...right].every((g) => /^[0-9a-f]{1,4}$/i.test(g))) return null;
  const missing = 8 - left.length - right.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const groups = [...left, ...Array<string>(missing).fill('0'), ...right].map((g) => parseInt(g, 16));
  const bytes = new Uint8Array(16);
  groups.forEach((g, i) => {
    bytes[i * 2] = g >> 8;
    bytes[i * 2 + 1] = g & 0xff;
  });
  return bytes;
}
