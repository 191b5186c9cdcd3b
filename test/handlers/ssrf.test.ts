// The SSRF guard, table-driven: every hostile spelling refused, the private
// ones let through only when private targets are allowed, scheme and userinfo
// rules holding either way, and ordinary public URLs accepted.
import { describe, expect, it } from 'vitest';
import { checkTarget } from '../../src/handlers/ssrf.ts';
import { readConfig } from '../../src/config.ts';

/** Hosts that are fine for local development, refused in production. */
const PRIVATE: readonly (readonly [url: string, because: RegExp])[] = [
  // names
  ['http://localhost/', /single-label|localhost/],
  ['http://LOCALHOST./hook', /localhost/],
  ['http://ｌｏｃａｌｈｏｓｔ/', /localhost/],
  ['http://app.localhost:3000/', /\.localhost/],
  ['http://metadata.google.internal/computeMetadata/v1/', /metadata/],
  ['http://metadata.google.internal./computeMetadata/v1/', /metadata/],
  ['http://metadata/', /metadata/],
  ['http://instance-data/latest/meta-data/', /metadata/],
  ['http://metadata.tencentyun.com/', /metadata/],
  ['http://billing.internal/', /\.internal/],
  ['http://printer.local/', /\.local/],
  ['http://router.localdomain/', /\.localdomain/],
  ['http://nas.home.arpa/', /\.arpa/],
  ['http://fileserver/', /single-label/],
  ['http://wiki.corp/', /\.corp/],
  ['http://db.svc.cluster.local/', /\.local/],
  // IPv4 loopback in every spelling
  ['http://127.0.0.1/', /loopback/],
  ['http://127.0.0.1:22/', /loopback/],
  ['http://127.255.255.254/', /loopback/],
  ['http://2130706433/', /loopback/],
  ['http://0177.0.0.1/', /loopback/],
  ['http://0x7f.1/', /loopback/],
  ['http://0x7f000001/', /loopback/],
  ['http://017700000001/', /loopback/],
  ['http://127.1/', /loopback/],
  ['http://0x7f.0.0x0.01/', /loopback/],
  ['http://127.0.0.1./', /loopback/],
  ['http://127.0.0.1../', /loopback/],
  ['http://0x7f.1../', /loopback/],
  ['http://%31%32%37.0.0.1/', /loopback/],
  ['http://１２７.０.０.１/', /loopback/],
  ['http://127。0。0。1/', /loopback/],
  ['http:\\\\127.0.0.1\\', /loopback/],
  // other IPv4 classes
  ['http://0.0.0.0/', /unspecified/],
  ['http://0/', /unspecified/],
  ['http://10.0.0.1/', /private/],
  ['http://10.255.255.255/', /private/],
  ['http://172.16.0.1/', /private/],
  ['http://172.31.255.255/', /private/],
  ['http://192.168.1.1:8080/admin', /private/],
  ['http://3232235777/', /private/], // 192.168.1.1
  ['http://100.64.0.1/', /carrier-grade/],
  ['http://100.127.255.255/', /carrier-grade/],
  ['http://100.100.100.200/latest/meta-data/', /metadata/],
  ['http://169.254.169.254/latest/meta-data/', /metadata/],
  ['http://0xa9fea9fe/', /metadata/],
  ['http://169.254.1.1/', /link-local/],
  ['http://192.0.0.8/', /IETF/],
  ['http://192.0.2.1/', /documentation/],
  ['http://198.18.0.1/', /benchmarking/],
  ['http://198.51.100.7/', /documentation/],
  ['http://203.0.113.9/', /documentation/],
  ['http://224.0.0.1/', /multicast/],
  ['http://239.255.255.250/', /multicast/],
  ['http://255.255.255.255/', /broadcast/],
  ['http://240.0.0.1/', /reserved/],
  // IPv6
  ['http://[::1]/', /loopback/],
  ['http://[0:0:0:0:0:0:0:1]:8080/', /loopback/],
  ['http://[::]/', /unspecified/],
  ['http://[::ffff:127.0.0.1]/', /mapped.*loopback/],
  ['http://[::ffff:7f00:1]/', /mapped.*loopback/],
  ['http://[0:0:0:0:0:ffff:169.254.169.254]/', /mapped.*metadata/],
  ['http://[::ffff:10.0.0.1]/', /mapped.*private/],
  ['http://[::ffff:0:7f00:1]/', /translated.*loopback/],
  ['http://[::127.0.0.1]/', /IPv4-compatible/],
  ['http://[::8.8.8.8]/', /IPv4-compatible/],
  ['http://[64:ff9b::127.0.0.1]/', /NAT64.*loopback/],
  ['http://[64:ff9b::a9fe:a9fe]/', /NAT64.*metadata/],
  ['http://[64:ff9b:1::1]/', /local-use NAT64/],
  ['http://[2002:7f00:1::1]/', /6to4.*loopback/],
  ['http://[2002:c0a8:101::]/', /6to4.*private/],
  ['http://[fe80::1]/', /link-local/],
  ['http://[febf:ffff::1]/', /link-local/],
  ['http://[fc00::1]/', /unique-local/],
  ['http://[fd12:3456:789a::1]/', /unique-local/],
  ['http://[fd00:ec2::254]/latest/meta-data/', /metadata/],
  ['http://[fec0::1]/', /site-local/],
  ['http://[ff02::1]/', /multicast/],
  ['http://[2001:db8::1]/', /documentation/],
  ['http://[2001::1]/', /IETF/],
  ['http://[100::1]/', /reserved/],
];

/** Refused whatever the configuration says. */
const ALWAYS_REFUSED: readonly (readonly [url: string, because: RegExp])[] = [
  ['file:///etc/passwd', /scheme file:/],
  ['ftp://example.com/', /scheme ftp:/],
  ['gopher://127.0.0.1:6379/_INFO', /scheme gopher:/],
  ['ws://example.com/socket', /scheme ws:/],
  ['javascript:alert(1)', /scheme javascript:/],
  ['data:text/plain,hello', /scheme data:/],
  ['http://user:pass@example.com/', /credentials/],
  ['https://token@hooks.example.com/', /credentials/],
  ['http://example.com@127.0.0.1/', /credentials/],
  ['http://:secret@example.com/', /credentials/],
  ['not a url', /not a valid/],
  ['/relative/path', /not a valid/],
  ['', /not a valid/],
  ['http://1.2.3.4.5/', /not a valid/],
  ['http://[fe80::1%25eth0]/', /not a valid/],
];

const PUBLIC = [
  'https://example.com/hook',
  'http://example.com./',
  'https://hooks.slack.com/services/T000/B000/XXXX',
  'https://api.example.co.uk:8443/v1/events?x=1#frag',
  'http://8.8.8.8/',
  'https://1.1.1.1:444/dns',
  'http://100.63.255.255/', // just below carrier-grade NAT
  'http://100.128.0.1/', // just above it
  'http://172.15.255.255/',
  'http://172.32.0.1/',
  'http://169.253.255.255/',
  'http://11.0.0.1/',
  'http://192.167.255.255/',
  'https://[2606:4700:4700::1111]/',
  'https://[2001:4860:4860::8888]:8443/',
  'http://[::ffff:8.8.8.8]/', // mapped, but to a public address
  'http://[64:ff9b::808:808]/', // NAT64 of a public address
  'http://[2002:808:808::1]/', // 6to4 of a public address
  'https://localhost.example.com/',
  'https://metadata.example.com/',
  'https://internal.example.net/',
  'https://xn--bcher-kva.de/',
  'https://bücher.de/',
];

describe('checkTarget with the guard on', () => {
  it('has a table of at least 40 hostile URLs', () => {
    expect(PRIVATE.length + ALWAYS_REFUSED.length).toBeGreaterThanOrEqual(40);
  });

  it.each(PRIVATE)('refuses %s', (url, because) => {
    const result = checkTarget(url, { allowPrivate: false });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toMatch(because);
  });

  it.each(ALWAYS_REFUSED)('refuses %s', (url, because) => {
    const result = checkTarget(url, { allowPrivate: false });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toMatch(because);
  });

  it.each(PUBLIC)('accepts %s', (url) => {
    const result = checkTarget(url, { allowPrivate: false, allowedPorts: [444, 8443] });
    expect(result).toMatchObject({ ok: true });
    if (result.ok) expect(result.url.href).toBe(new URL(url).href);
  });
});

describe('checkTarget with private targets allowed', () => {
  it.each(PRIVATE)('accepts %s', (url) => {
    const result = checkTarget(url, { allowPrivate: true });
    expect(result.ok).toBe(true);
  });

  it.each(ALWAYS_REFUSED)('still refuses %s', (url, because) => {
    const result = checkTarget(url, { allowPrivate: true });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toMatch(because);
  });

  it.each(PUBLIC)('accepts %s', (url) => {
    expect(checkTarget(url, { allowPrivate: true }).ok).toBe(true);
  });
});

describe('ports', () => {
  it('allows 80 and 443 (explicit or by default) and the configured list; refuses the rest', () => {
    for (const url of ['http://example.com/', 'https://example.com/', 'http://example.com:80/', 'https://example.com:443/', 'https://example.com:80/', 'http://example.com:443/']) {
      expect(checkTarget(url, { allowPrivate: false }).ok, url).toBe(true);
    }
    for (const url of ['https://example.com:8443/', 'http://1.1.1.1:22/', 'http://example.com:6379/', 'http://example.com:0/', 'http://[2606:4700:4700::1111]:25/']) {
      const result = checkTarget(url, { allowPrivate: false });
      expect(result.ok, url).toBe(false);
      expect(!result.ok && result.reason, url).toMatch(/^port \d+ is not allowed/);
    }
    expect(checkTarget('https://example.com:8443/', { allowPrivate: false, allowedPorts: [8443] }).ok).toBe(true);
    expect(checkTarget('https://example.com:8444/', { allowPrivate: false, allowedPorts: [8443] }).ok).toBe(false);
  });

  it('allows any port with private targets allowed (local development)', () => {
    expect(checkTarget('http://127.0.0.1:54321/hook', { allowPrivate: true }).ok).toBe(true);
    expect(checkTarget('https://example.com:8443/', { allowPrivate: true }).ok).toBe(true);
  });

  it('reads ALLOWED_TARGET_PORTS as a comma-separated list', () => {
    expect(readConfig({}).allowedTargetPorts).toEqual([]);
    expect(readConfig({ ALLOWED_TARGET_PORTS: '8443, 8080' }).allowedTargetPorts).toEqual([8443, 8080]);
    expect(() => readConfig({ ALLOWED_TARGET_PORTS: '70000' })).toThrow(/ALLOWED_TARGET_PORTS/);
    expect(() => readConfig({ ALLOWED_TARGET_PORTS: 'ssh' })).toThrow(/ALLOWED_TARGET_PORTS/);
  });
});

describe('checkTarget results', () => {
  it('returns the parsed URL, normalized by the WHATWG parser', () => {
    const result = checkTarget('HTTPS://Example.COM:443/a/../b?q=1', { allowPrivate: false });
    expect(result.ok && result.url.href).toBe('https://example.com/b?q=1');
  });

  it('names the host in the reason', () => {
    const result = checkTarget('http://0x7f.1/', { allowPrivate: false });
    expect(!result.ok && result.reason).toBe('host 127.0.0.1 is refused: loopback address');
  });
});
